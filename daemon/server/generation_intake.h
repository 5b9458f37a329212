// Where every generation enters the daemon, whichever surface it came through (the RPC's
// generate and chat, OpenAI's HTTP endpoints, ...): the one path from a GenerationRequest to a
// GenerationJob queued on a model.
//
//   1. refused at once while the daemon stops accepting (DISCONNECTED); else counted as admitted
//      (DaemonCore::admitGeneration), so a drain waits for it until it is queued;
//   2. validateRequest() - the only place jitllmd's own rules are checked (RequestError);
//   3. the caller's tier resolved (resolveTier: RequestError, forbidden, for a raise a non-admin
//      may not make);
//   4. the prompt prepared off the event loop (BackgroundThreads::post): chat messages rendered
//      with the model's template, text tokenized - a 32K-token prompt takes its time on a worker
//      while every other reply keeps streaming;
//   5. the job queued on the model (ModelHost::submit: OVERLOADED past max_sessions or the
//      caller's max_sessions_per_uid).
//
// Steps 1-3 run before start() returns, so a surface catches RequestError there and answers in
// its own terms; steps 4-5 reject the returned promise (jitllm::Error through kj_errors.h).
//
// Ownership: borrows the DaemonCore and the BackgroundThreads, which outlive every request.
// Thread-safety: the event loop's (KJ) thread only.
#pragma once

#include <kj/async.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"
#include "daemon/server/generation_job.h"

namespace jitllm::server {

// Who a request runs as: a local user (its uid, from the socket's peer credentials), or an
// anonymous TCP client with what its bearer token grants.
struct Caller {
  uid_t uid = 0;
  bool admin = false;
  bool anonymous = false;  // no local user: no groups to look up for its default tier
};

// The prompt's tokens for `host`'s model: a conversation rendered with its chat template, text
// tokenized with its special tokens and BOS, token ids as they are. Any thread (the model's
// tokenizer and template are immutable). Error(FAILED) when the tokens come out empty.
std::vector<int32_t> preparePrompt(const ModelHost& host, const GenerationRequest& request);

// A job on its way, and the host it was queued on: the caller keeps the host while it reads the
// job (the job's worker wake-up calls into it).
struct QueuedGeneration {
  std::shared_ptr<ModelHost> host;
  std::shared_ptr<GenerationJob> job;
};

class GenerationIntake final {
 public:
  GenerationIntake(DaemonCore& core, BackgroundThreads& background) : core_(core), background_(background) {}

  // Which host runs a request, asked when the job is queued (a model and its replicas share the
  // requests: the one with the fewest jobs then, DaemonCore::route); empty: the host given.
  using Router = std::function<std::shared_ptr<ModelHost>()>;

  // Steps 1-5 above for `request` on `host` (or the host `route` picks when it is queued; the
  // prompt is prepared with `host`'s template and tokenizer, which its replicas share), run as
  // `caller`. `admission`: taken by a surface that had work to do first (HTTP parses the body off
  // the loop), which step 1 then skips. The job comes back once queued.
  kj::Promise<QueuedGeneration> start(std::shared_ptr<ModelHost> host, GenerationRequest request, const Caller& caller,
                                      Router route = {},
                                      std::shared_ptr<DaemonCore::AdmissionGuard> admission = nullptr);

 private:
  DaemonCore& core_;
  BackgroundThreads& background_;
};

}  // namespace jitllm::server
