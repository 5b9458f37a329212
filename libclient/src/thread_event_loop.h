// The KJ event loop that the synchronous Clients of one thread share. KJ allows one event loop per
// thread, so the first Client on a thread makes it and the last one to go destroys it.
//
// It also tracks whether a Client method is waiting on it, because a callback that calls a Client
// method would wait inside a wait, which KJ forbids: that is refused with a clear Error instead.
//
// Thread-safety: belongs to its thread.
#pragma once

#include <kj/async-io.h>
#include <kj/exception.h>

#include <memory>
#include <thread>

namespace jitllm::client {

class ThreadEventLoop final {
 public:
  // This thread's loop, made if none is alive. Error(FAILED) if the thread already runs a KJ
  // event loop that is not ours.
  static std::shared_ptr<ThreadEventLoop> forThisThread();

  ThreadEventLoop();
  ThreadEventLoop(const ThreadEventLoop&) = delete;
  ThreadEventLoop& operator=(const ThreadEventLoop&) = delete;

  kj::AsyncIoContext& io() { return io_; }
  kj::WaitScope& waitScope() { return io_.waitScope; }
  std::thread::id thread() const { return thread_; }

  // KJ logs a failed write on a connection the daemon closed ("disconnected: writev: Broken
  // pipe") before the call fails; the caller gets that failure as an Error, so the log line is only
  // noise on a program's stderr. Other messages pass on to the next callback. KJ wants exception
  // callbacks on the stack: Busy holds one.
  class QuietDisconnects final : public kj::ExceptionCallback {
   public:
    void logMessage(kj::LogSeverity severity, const char* file, int line, int contextDepth,
                    kj::String&& text) override;
  };

  // Held on the stack for the duration of one Client method (the only time the loop runs);
  // Error(FAILED) if another is already running on this loop (a callback calling back into a
  // Client) or if called from another thread.
  class Busy final {
   public:
    explicit Busy(ThreadEventLoop& loop);
    ~Busy();
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    ThreadEventLoop& loop_;
    QuietDisconnects quiet_;
  };

 private:
  kj::AsyncIoContext io_;
  std::thread::id thread_;
  bool busy_ = false;
};

}  // namespace jitllm::client
