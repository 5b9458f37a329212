#include "thread_event_loop.h"

#include "jitllm/client_error.h"

namespace jitllm::client {
namespace {

thread_local std::weak_ptr<ThreadEventLoop> tCurrent;

}  // namespace

std::shared_ptr<ThreadEventLoop> ThreadEventLoop::forThisThread() {
  if (auto loop = tCurrent.lock()) return loop;
  std::shared_ptr<ThreadEventLoop> loop;
  try {
    loop = std::make_shared<ThreadEventLoop>();
  } catch (const kj::Exception& e) {
    throw Error(ErrorKind::kFailed,
                std::string("this thread already runs a KJ event loop; connect on it with "
                            "jitllm::client::DaemonConnection (jitllm/client_capnp.h) instead: ") +
                    e.getDescription().cStr());
  }
  tCurrent = loop;
  return loop;
}

void ThreadEventLoop::QuietDisconnects::logMessage(kj::LogSeverity severity, const char* file, int line,
                                                   int contextDepth, kj::String&& text) {
  if (severity == kj::LogSeverity::ERROR && text.asPtr().startsWith("disconnected: ")) return;
  kj::ExceptionCallback::logMessage(severity, file, line, contextDepth, kj::mv(text));
}

ThreadEventLoop::ThreadEventLoop() : io_(kj::setupAsyncIo()), thread_(std::this_thread::get_id()) {}

ThreadEventLoop::Busy::Busy(ThreadEventLoop& loop) : loop_(loop) {
  if (std::this_thread::get_id() != loop.thread_) {
    throw Error(ErrorKind::kFailed,
                "a jitllm::client::Client was called from a thread other than the one that connected it; "
                "use one Client per thread");
  }
  if (loop.busy_) {
    throw Error(ErrorKind::kFailed,
                "a jitllm::client callback called a Client method on the same thread while the Client was "
                "waiting for it; collect what the callback needs and call after the method returns");
  }
  loop.busy_ = true;
}

ThreadEventLoop::Busy::~Busy() { loop_.busy_ = false; }

}  // namespace jitllm::client
