// jitllmd's HTTP listeners (--http unix:PATH / HOST:PORT, and sockets systemd passes named `http`)
// and their connections, served by KJ's HttpServer on the daemon's KJ loop.
//
// Who may connect: a Unix socket is the filesystem's to guard (mode 0660 and group jitllm for the
// system service, 0600 for a user's daemon) and each client is known by SO_PEERCRED; a TCP
// address must be loopback unless bearer tokens are configured (http_token_file) - the daemon
// refuses to start otherwise - and without tokens a client from any other address is closed.
//
// What one client can hold (docs/api.md, "Limits"): at most http_max_connections connections
// over all listeners - at the limit, a new one takes the place of the longest-open connection
// that has no request in progress, or is closed when every one is busy; a request's headers must
// arrive within http_header_timeout_ms of the connection (or of its first byte, on a kept-alive
// connection, which waits at most 5 s idle), and its body within http_body_timeout_ms.
//
// Ownership: owns the listening sockets, the HttpServer and every connection; borrows the core,
// the background threads, the I/O providers and the timer, which outlive it.
// Thread-safety: the KJ (RPC) thread only.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "daemon/http/http_service.h"
#include "daemon/server/listen_socket.h"

namespace jitllm::server::http {

// `unix:PATH` or `HOST:PORT` (HOST may be [v6]); Error(FAILED) saying the syntax otherwise.
struct HttpAddress {
  bool unix = false;
  std::string path;      // unix
  std::string hostPort;  // TCP, as KJ's network parses it
  static HttpAddress parse(const std::string& text);
};

// Whether a TCP address as KJ prints it ("127.0.0.1:8080", "[::1]:8080") is a loopback one.
bool isLoopback(const std::string& address);

class HttpListener final {
 public:
  HttpListener(DaemonCore& core, BackgroundThreads& background, kj::AsyncIoProvider& io,
               kj::LowLevelAsyncIoProvider& lowLevel, kj::UnixEventPort& eventPort, kj::Timer& timer);
  ~HttpListener();

  // Starts listening on `address`; resolves once it listens (a TCP host name is looked up first).
  // Error(FAILED) for a non-loopback TCP address without http_token_file.
  kj::Promise<void> listen(const std::string& address);
  // A listening socket systemd passed (named `http`).
  void adopt(ListenSocket socket);
  // /health answers 200 from now on (503 before).
  void setReady();
  // Stops taking connections (the daemon is draining); those open go on.
  void stopAccepting();
  size_t connectionCount() const { return connections_.size(); }

 private:
  struct Listening;
  struct Connection;
  void serve(kj::Own<kj::ConnectionReceiver> receiver, bool tcp, std::string description);
  kj::Promise<void> acceptLoop(Listening& l);
  void admit(kj::AuthenticatedStream&& accepted, bool tcp);
  // Frees a connection slot; false when every connection is busy.
  bool evictIdle();

  DaemonCore& core_;
  kj::AsyncIoProvider& io_;
  kj::LowLevelAsyncIoProvider& lowLevel_;
  kj::Timer& timer_;
  std::unique_ptr<HttpShared> shared_;
  kj::HttpServer server_;
  std::vector<kj::Own<Listening>> listening_;
  std::list<Connection> connections_;  // oldest first
  Connection* admitting_ = nullptr;    // the connection whose service the server is making now
  kj::TaskSet tasks_;
  struct ErrorHandler final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };
  static ErrorHandler errorHandler_;
};

}  // namespace jitllm::server::http
