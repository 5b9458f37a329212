#include "daemon/server/reply_wakeups.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace jitllm::server {

struct ReplyWakeups::Queue {
  std::mutex mutex;
  std::vector<uint64_t> ready;                             // ids woken and not yet taken by the pump
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> signal;   // armed by the pump while it waits

  void signalLocked() {
    if (signal) {
      signal->fulfill();
      signal = nullptr;
    }
  }
};

namespace {

// Per thread: how deep the StepScopes are, and the queues owed a signal when they end.
struct ScopeState {
  int depth = 0;
  std::vector<std::shared_ptr<ReplyWakeups::Queue>> owed;
};
thread_local ScopeState scopeState;

}  // namespace

ReplyWakeups::StepScope::StepScope() { scopeState.depth++; }

ReplyWakeups::StepScope::~StepScope() {
  if (--scopeState.depth > 0) return;
  auto owed = std::move(scopeState.owed);
  scopeState.owed.clear();
  for (auto& q : owed) {
    std::lock_guard lock(q->mutex);
    if (!q->ready.empty()) q->signalLocked();  // else the pump took them already
  }
}

ReplyWakeups::ReplyWakeups() : queue_(std::make_shared<Queue>()), pumping_(nullptr) {
  pumping_ = pump().eagerlyEvaluate(nullptr);
}

ReplyWakeups::~ReplyWakeups() {
  std::lock_guard lock(queue_->mutex);
  queue_->signal = nullptr;  // its promise goes with pumping_; wakers called later queue into nothing
}

kj::Promise<void> ReplyWakeups::pump() {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  {
    std::lock_guard lock(queue_->mutex);
    queue_->signal = kj::mv(paf.fulfiller);
    if (!queue_->ready.empty()) queue_->signalLocked();
  }
  return paf.promise.then([this] {
    signals_++;
    std::vector<uint64_t> ready;
    {
      std::lock_guard lock(queue_->mutex);
      ready.swap(queue_->ready);
    }
    for (uint64_t id : ready) {
      auto it = armed_.find(id);
      if (it == armed_.end()) continue;  // its promise was dropped
      auto fulfiller = kj::mv(it->second);
      armed_.erase(it);
      fulfiller->fulfill();
    }
    return pump();
  });
}

std::pair<kj::Promise<void>, std::function<void()>> ReplyWakeups::arm() {
  const uint64_t id = nextId_++;
  auto paf = kj::newPromiseAndFulfiller<void>();
  armed_.emplace(id, kj::mv(paf.fulfiller));
  auto forget = kj::defer([this, id] { armed_.erase(id); });
  std::function<void()> waker = [queue = queue_, id, fired = std::make_shared<std::once_flag>()] {
    std::call_once(*fired, [&] {
      std::lock_guard lock(queue->mutex);
      queue->ready.push_back(id);
      if (scopeState.depth > 0) {
        // Owed per thread: another worker's scope must not hold this one's replies back.
        auto& owed = scopeState.owed;
        if (std::find(owed.begin(), owed.end(), queue) == owed.end()) owed.push_back(queue);
      } else {
        queue->signalLocked();
      }
    });
  };
  // Fulfilled first, then the promise is dropped, which erases nothing (already gone).
  return {paf.promise.attach(kj::mv(forget)), std::move(waker)};
}

}  // namespace jitllm::server
