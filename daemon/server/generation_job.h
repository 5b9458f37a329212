// One generation request on its way through the daemon: what was asked (prepared and validated by
// GenerationIntake), and the tokens and text produced so far, handed from the model's worker
// thread to the event loop's thread.
//
// The worker pushes tokens and finally a result or an error; the RPC side takes them in batches
// and sends them to the client. The hand-off is a mutex-guarded buffer plus a one-shot waker the
// RPC side arms when it has nothing to send (it fulfils a KJ cross-thread promise; this class
// knows nothing of KJ). Flow control: while more than `maxQueuedTokens` tokens wait to be taken,
// throttled() is true and the worker skips this job, so a slow reader slows only itself and
// memory stays bounded. Dropping the RPC call calls cancel(); the worker then ends the session
// and frees its KV pages.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "daemon/server/generation_request.h"
#include "daemon/server/generation_stats.h"

namespace jitllm::server {

// A generated token's log-probability under the model (log-softmax of its logits, before any
// sampling parameter), and the most likely alternatives at that step, best first.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

class GenerationJob final {
 public:
  GenerationJob(GenerationRequest request, size_t maxQueuedTokens);

  const GenerationRequest& request() const { return request_; }

  // --- the RPC side ---
  struct Batch {
    std::vector<int32_t> ids;
    std::string text;
    std::vector<TokenLogprob> logprobs;  // one per id when the request asked for them
    bool finished = false;               // no more will come
    std::optional<Error> error;          // set when it finished with an error
    GenerationStats stats;               // valid when finished without error
  };
  Batch take();
  // One-shot: called from the worker thread when something arrives, or at once if something
  // already waits.
  void setWaker(std::function<void()> waker);
  void cancel();

  // --- the worker side ---
  bool cancelled() const;
  bool throttled() const;
  void push(int32_t id, const std::string& text, std::optional<TokenLogprob> logprob = std::nullopt);
  void appendText(const std::string& text);
  void finish(const GenerationStats& stats);
  void fail(const Error& error);
  // The worker's own wake-up, called when take() lifts the throttle or cancel() is called.
  void setWorkerWaker(std::function<void()> waker);
  void setSessionId(uint64_t id);
  uint64_t sessionId() const;
  // Finished or failed: it holds no session any more. Any thread.
  bool ended() const;

 private:
  void wakeLocked(std::unique_lock<std::mutex>& lock);

  const GenerationRequest request_;
  const size_t maxQueuedTokens_;
  mutable std::mutex mutex_;
  std::vector<int32_t> ids_;
  std::string text_;
  std::vector<TokenLogprob> logprobs_;
  bool finished_ = false;
  bool cancelled_ = false;
  std::optional<Error> error_;
  GenerationStats stats_;
  uint64_t sessionId_ = 0;
  std::function<void()> waker_;
  std::function<void()> workerWaker_;
};

}  // namespace jitllm::server
