#include "daemon/server/event_hub.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace jitllm::server {

const char* eventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kDaemon:
      return "daemon";
    case EventKind::kDevice:
      return "device";
    case EventKind::kModel:
      return "model";
    case EventKind::kSession:
      return "session";
    case EventKind::kMigration:
      return "migration";
  }
  return "unknown";
}

std::vector<DaemonEvent> EventMailbox::take(size_t* dropped) {
  std::lock_guard lock(mutex_);
  std::vector<DaemonEvent> out(queue_.begin(), queue_.end());
  queue_.clear();
  if (dropped) *dropped = dropped_;
  dropped_ = 0;
  return out;
}

void EventMailbox::setWaker(std::function<void()> waker) {
  std::function<void()> now;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) {
      waker_ = std::move(waker);
    } else {
      now = std::move(waker);
    }
  }
  if (now) now();
}

bool EventMailbox::visible(const DaemonEvent& e) const { return !viewer_ || !e.ownerUid || *e.ownerUid == *viewer_; }

void EventMailbox::push(const DaemonEvent& e) {
  if (!visible(e)) return;
  std::function<void()> wake;
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() >= kMaxQueued) {
      queue_.pop_front();
      dropped_++;
    }
    queue_.push_back(e);
    wake = std::move(waker_);
    waker_ = nullptr;
  }
  if (wake) wake();
}

void EventHub::emit(DaemonEvent e) {
  if (e.unixMs == 0) {
    e.unixMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
  }
  spdlog::info("[{}] {}{}{}", eventKindName(e.kind), e.what, e.message.empty() ? "" : ": ", e.message);
  std::vector<std::shared_ptr<EventMailbox>> live;
  {
    std::lock_guard lock(mutex_);
    history_.push_back(e);
    if (history_.size() > kHistory) history_.pop_front();
    for (auto it = subscribers_.begin(); it != subscribers_.end();) {
      if (auto s = it->lock()) {
        live.push_back(std::move(s));
        ++it;
      } else {
        it = subscribers_.erase(it);
      }
    }
  }
  for (auto& s : live) s->push(e);
}

std::shared_ptr<EventMailbox> EventHub::subscribe(size_t replay, std::optional<uint32_t> viewer) {
  auto box = std::make_shared<EventMailbox>();
  box->viewer_ = viewer;
  std::lock_guard lock(mutex_);
  // The last `replay` events this subscriber may see, oldest first.
  std::vector<const DaemonEvent*> recent;
  for (auto it = history_.rbegin(); it != history_.rend() && recent.size() < replay; ++it) {
    if (box->visible(*it)) recent.push_back(&*it);
  }
  for (auto it = recent.rbegin(); it != recent.rend(); ++it) box->push(**it);
  subscribers_.push_back(box);
  return box;
}

}  // namespace jitllm::server
