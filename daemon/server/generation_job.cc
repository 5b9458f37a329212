#include "daemon/server/generation_job.h"

namespace jitllm::server {

GenerationJob::GenerationJob(GenerationRequest request, size_t maxQueuedTokens)
    : request_(std::move(request)), maxQueuedTokens_(std::max<size_t>(1, maxQueuedTokens)) {}

GenerationJob::Batch GenerationJob::take() {
  std::function<void()> wakeWorker;
  Batch b;
  {
    std::lock_guard lock(mutex_);
    const bool wasThrottled = ids_.size() >= maxQueuedTokens_;
    b.ids.swap(ids_);
    b.text.swap(text_);
    b.logprobs.swap(logprobs_);
    b.finished = finished_;
    b.error = error_;
    b.stats = stats_;
    if (wasThrottled) wakeWorker = workerWaker_;
  }
  if (wakeWorker) wakeWorker();
  return b;
}

void GenerationJob::setWaker(std::function<void()> waker) {
  std::unique_lock lock(mutex_);
  if (!ids_.empty() || !text_.empty() || finished_) {
    lock.unlock();
    waker();
    return;
  }
  waker_ = std::move(waker);
}

void GenerationJob::cancel() {
  std::function<void()> wakeWorker;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_ || finished_) return;
    cancelled_ = true;
    wakeWorker = workerWaker_;
  }
  if (wakeWorker) wakeWorker();
}

bool GenerationJob::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

bool GenerationJob::throttled() const {
  std::lock_guard lock(mutex_);
  return ids_.size() >= maxQueuedTokens_;
}

void GenerationJob::wakeLocked(std::unique_lock<std::mutex>& lock) {
  std::function<void()> w = std::move(waker_);
  waker_ = nullptr;
  lock.unlock();
  if (w) w();
}

void GenerationJob::push(int32_t id, const std::string& text, std::optional<TokenLogprob> logprob) {
  std::unique_lock lock(mutex_);
  ids_.push_back(id);
  if (logprob) logprobs_.push_back(std::move(*logprob));
  text_ += text;
  wakeLocked(lock);
}

void GenerationJob::appendText(const std::string& text) {
  if (text.empty()) return;
  std::unique_lock lock(mutex_);
  text_ += text;
  wakeLocked(lock);
}

void GenerationJob::finish(const GenerationStats& stats) {
  std::unique_lock lock(mutex_);
  if (finished_) return;
  finished_ = true;
  stats_ = stats;
  wakeLocked(lock);
}

void GenerationJob::fail(const Error& error) {
  std::unique_lock lock(mutex_);
  if (finished_) return;
  finished_ = true;
  error_ = error;
  wakeLocked(lock);
}

void GenerationJob::setWorkerWaker(std::function<void()> waker) {
  std::lock_guard lock(mutex_);
  workerWaker_ = std::move(waker);
}

void GenerationJob::setSessionId(uint64_t id) {
  std::lock_guard lock(mutex_);
  sessionId_ = id;
}

uint64_t GenerationJob::sessionId() const {
  std::lock_guard lock(mutex_);
  return sessionId_;
}

}  // namespace jitllm::server

namespace jitllm::server {

bool GenerationJob::ended() const {
  std::lock_guard lock(mutex_);
  return finished_ || error_.has_value();
}

}  // namespace jitllm::server
