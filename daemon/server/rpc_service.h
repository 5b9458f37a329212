// The Daemon capability one client connection sees: Cap'n Proto RPC methods mapped onto the
// DaemonCore, with that connection's peer credentials deciding what it may do.
//
// Runs on the RPC (KJ) thread. Work that blocks - loading a model - runs on a background thread
// and comes back through a cross-thread promise; generations run on the model's worker thread and
// stream back through their GenerationJob (see generation_job.h). Dropping a generate/chat call
// cancels it.
//
// Ownership: borrows the DaemonCore, the BackgroundThreads and the RPC thread's ReplyWakeups, which
// outlive every connection.
// Thread-safety: RPC thread only.
#pragma once

#include <kj/async.h>

#include <memory>

#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"
#include "daemon/server/generation_intake.h"
#include "daemon/server/reply_wakeups.h"
#include "jitllm/jitllm.capnp.h"

namespace jitllm::server {

// What a connection has going on that makes its silence not idleness: replies being generated
// for it, event subscriptions it holds. The listener's idle timeout spares such a connection.
struct ConnectionActivity {
  int generations = 0;
  int subscriptions = 0;
  bool busy() const { return generations > 0 || subscriptions > 0; }
};

class DaemonService final : public rpc::Daemon::Server {
 public:
  DaemonService(DaemonCore& core, BackgroundThreads& background, ReplyWakeups& wakeups, PeerCredentials peer,
                std::shared_ptr<ConnectionActivity> activity = std::make_shared<ConnectionActivity>());

  kj::Promise<void> version(VersionContext context) override;
  kj::Promise<void> devices(DevicesContext context) override;
  kj::Promise<void> models(ModelsContext context) override;
  kj::Promise<void> load(LoadContext context) override;
  kj::Promise<void> unload(UnloadContext context) override;
  kj::Promise<void> generate(GenerateContext context) override;
  kj::Promise<void> chat(ChatContext context) override;
  kj::Promise<void> events(EventsContext context) override;
  kj::Promise<void> cancelSession(CancelSessionContext context) override;
  kj::Promise<void> migrate(MigrateContext context) override;
  kj::Promise<void> tensorParallel(TensorParallelContext context) override;
  kj::Promise<void> replicate(ReplicateContext context) override;
  kj::Promise<void> pin(PinContext context) override;
  kj::Promise<void> unpin(UnpinContext context) override;
  kj::Promise<void> policy(PolicyContext context) override;

  // Where a finished generation's results go (generate and chat have different contexts).
  struct Reply;

 private:
  // generate and chat: the request through the intake, its reply streamed to `sink`, then `reply`.
  kj::Promise<void> startGeneration(GenerationRequest request, rpc::TokenSink::Client sink, kj::Own<Reply> reply);

  DaemonCore& core_;
  BackgroundThreads& background_;
  ReplyWakeups& wakeups_;
  GenerationIntake intake_;
  const PeerCredentials peer_;
  std::shared_ptr<ConnectionActivity> activity_;
};

}  // namespace jitllm::server
