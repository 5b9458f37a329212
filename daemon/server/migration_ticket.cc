#include "daemon/server/migration_ticket.h"

namespace jitllm::server {

void MigrationTicket::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

bool MigrationTicket::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

bool MigrationTicket::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

MigrationResult MigrationTicket::result() const {
  std::lock_guard lock(mutex_);
  return result_;
}

std::optional<Error> MigrationTicket::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void MigrationTicket::setWaker(std::function<void()> waker) {
  {
    std::lock_guard lock(mutex_);
    if (!done_) {
      waker_ = std::move(waker);
      return;
    }
  }
  waker();
}

bool MigrationTicket::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return doneChanged_.wait_for(lock, timeout, [&] { return done_; });
}

void MigrationTicket::succeed(const runtime::MigrationStats& stats) {
  std::unique_lock lock(mutex_);
  result_.stats = stats;
  result_.committed = true;
  finish(lock);
}

void MigrationTicket::fail(const Error& error) {
  std::unique_lock lock(mutex_);
  error_ = error;
  finish(lock);
}

void MigrationTicket::finish(std::unique_lock<std::mutex>& lock) {
  done_ = true;
  std::function<void()> w = std::move(waker_);
  waker_ = nullptr;
  lock.unlock();
  doneChanged_.notify_all();
  if (w) w();
}

}  // namespace jitllm::server
