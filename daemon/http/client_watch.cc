#include "daemon/http/client_watch.h"

#include <fcntl.h>
#include <poll.h>

namespace jitllm::server::http {
namespace {

// Whether the peer has shut its side of the socket (or the socket failed), without reading.
bool peerShut(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

}  // namespace

ClientWatch::ClientWatch(kj::UnixEventPort& port, kj::AsyncIoStream& stream, int fd) : stream_(stream) {
  if (fd < 0) return;
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return;  // out of descriptors: the stream's signal alone
  dup_ = kj::AutoCloseFd(copy);
  // A duplicate has its own registration in the event port's epoll set, beside the stream's.
  observer_ = kj::heap<kj::UnixEventPort::FdObserver>(port, dup_.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ);
}

ClientWatch::~ClientWatch() = default;

kj::Promise<void> ClientWatch::readSideEnded() {
  return observer_->whenBecomesReadable().then([this]() -> kj::Promise<void> {
    if (peerShut(dup_.get())) return kj::READY_NOW;
    return readSideEnded();  // bytes of a next request: wait for the next event
  });
}

kj::Promise<void> ClientWatch::gone() {
  kj::Promise<void> disconnected = stream_.whenWriteDisconnected();
  if (!observer_) return disconnected;
  // The observer's registration reports the state at once, so a client that left before the
  // watch began is seen too.
  if (peerShut(dup_.get())) return kj::READY_NOW;
  return disconnected.exclusiveJoin(readSideEnded());
}

}  // namespace jitllm::server::http
