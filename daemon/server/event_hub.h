// Daemon events (device, model and session changes) with a short history, fanned out to
// subscribers.
//
// Producers are any thread (model workers, the loader, the RPC thread); each subscriber gets every
// event after it subscribed, in order, through its own mailbox, so a slow subscriber delays only
// itself. A mailbox holds at most kMaxQueued events; past that the oldest are dropped and the
// subscriber is told how many it missed.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/byte_size.h"

namespace jitllm::server {

enum class EventKind { kDaemon, kDevice, kModel, kSession, kMigration };

struct DaemonEvent {
  DaemonEvent() = default;
  DaemonEvent(int64_t unixMs, EventKind kind, std::string what, std::string model, std::string device,
              uint64_t sessionId, std::string message, std::optional<uint32_t> ownerUid = std::nullopt)
      : unixMs(unixMs),
        kind(kind),
        what(std::move(what)),
        model(std::move(model)),
        device(std::move(device)),
        sessionId(sessionId),
        message(std::move(message)),
        ownerUid(ownerUid) {}

  int64_t unixMs = 0;
  EventKind kind = EventKind::kDaemon;
  std::string what;  // "loaded", "session.finished", ...
  std::string model;
  std::string device;
  uint64_t sessionId = 0;
  std::string message;  // one human-readable line
  // Whose session the event is about: only that user and admins are told of it (a user's prompts,
  // sessions and uid are not another user's business). Unset: everyone may see it.
  std::optional<uint32_t> ownerUid;
};

class EventMailbox final {
 public:
  static constexpr size_t kMaxQueued = 1024;

  // Moves out what has arrived; `dropped` counts events lost to overflow since the last take.
  std::vector<DaemonEvent> take(size_t* dropped);
  // Called (once, from the producing thread) when an event arrives while none is waiting.
  void setWaker(std::function<void()> waker);

 private:
  friend class EventHub;
  void push(const DaemonEvent& e);  // drops what the viewer may not see
  bool visible(const DaemonEvent& e) const;

  std::optional<uint32_t> viewer_;  // set before the mailbox is shared; unset: sees everything
  std::mutex mutex_;
  std::deque<DaemonEvent> queue_;
  size_t dropped_ = 0;
  std::function<void()> waker_;
};

class EventHub final {
 public:
  static constexpr size_t kHistory = 256;

  void emit(DaemonEvent e);  // stamps unixMs when 0, logs it
  // A new mailbox that first receives up to `replay` recent events. Dropping the returned pointer
  // unsubscribes. With a viewer (a user who is not an admin), it receives only the events that
  // user may see: none about another user's sessions (DaemonEvent::ownerUid).
  std::shared_ptr<EventMailbox> subscribe(size_t replay, std::optional<uint32_t> viewer = std::nullopt);

 private:
  std::mutex mutex_;
  std::deque<DaemonEvent> history_;
  std::vector<std::weak_ptr<EventMailbox>> subscribers_;
};

const char* eventKindName(EventKind kind);

// A byte count as events write it ("812.0 KB", "1.2 MB"): jitllm::humanBytes.
using jitllm::humanBytes;

}  // namespace jitllm::server
