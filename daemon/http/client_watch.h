// Notices an HTTP client leaving while its request is being answered, without polling: a
// generation whose client has gone is cancelled and its KV pages freed at the worker's next step.
//
// Two signals, whichever comes first:
//   - the connection stream's whenWriteDisconnected(): a Unix-socket client closing (both
//     directions end), a reset, a write that failed;
//   - a TCP client's orderly close, which only ends the read side (epoll's EPOLLRDHUP) and which
//     KJ's stream does not turn into whenWriteDisconnected(): an observer on a duplicate of the
//     socket wakes on each read-side event and looks (one non-blocking poll()) whether the peer
//     shut its side; bytes of a next, pipelined request are left where they are.
// A client that merely sends nothing more, or half-closes after a request it waits the answer
// of, is hard to tell from one that left: the latter is taken as gone, as before.
//
// Ownership: borrows the event port and the stream (the connection's, which outlives the
// request); owns the duplicate descriptor and its observer.
// Thread-safety: the event loop's (KJ) thread only.
#pragma once

#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/io.h>

namespace jitllm::server::http {

class ClientWatch final {
 public:
  // `fd`: the connection's socket (-1: none to watch; the stream's signal alone).
  ClientWatch(kj::UnixEventPort& port, kj::AsyncIoStream& stream, int fd);
  ~ClientWatch();
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

  // Resolves once the client has gone; never while it is there. One caller at a time.
  kj::Promise<void> gone();

 private:
  kj::Promise<void> readSideEnded();

  kj::AsyncIoStream& stream_;
  kj::AutoCloseFd dup_;
  kj::Own<kj::UnixEventPort::FdObserver> observer_;
};

}  // namespace jitllm::server::http
