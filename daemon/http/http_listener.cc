#include "daemon/http/http_listener.h"

#include <kj/debug.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "base/error.h"

namespace jitllm::server::http {

HttpListener::ErrorHandler HttpListener::errorHandler_;

void HttpListener::ErrorHandler::taskFailed(kj::Exception&& e) {
  // A connection that ends badly (a client vanished, an unparsable request) is that client's matter.
  spdlog::debug("http: connection ended: {}", e.getDescription().cStr());
}

HttpAddress HttpAddress::parse(const std::string& text) {
  HttpAddress a;
  if (text.rfind("unix:", 0) == 0) {
    a.unix = true;
    a.path = text.substr(5);
    JITLLM_REQUIRE(!a.path.empty() && a.path[0] == '/', "http address '", text, "': unix:PATH needs an absolute path");
    return a;
  }
  const size_t colon = text.rfind(':');
  JITLLM_REQUIRE(colon != std::string::npos && colon > 0 && colon + 1 < text.size() &&
                     text.find_first_not_of("0123456789", colon + 1) == std::string::npos,
                 "http address '", text, "' is neither unix:PATH nor HOST:PORT (such as 127.0.0.1:8080)");
  a.hostPort = text;
  return a;
}

bool isLoopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address.rfind("[::1]", 0) == 0 || address.rfind("localhost:", 0) == 0 ||
         address.rfind("[::ffff:127.", 0) == 0;
}

namespace {

kj::HttpServerSettings settingsFrom(const DaemonConfig& config) {
  kj::HttpServerSettings s;
  s.headerTimeout = config.httpHeaderTimeoutMs * kj::MILLISECONDS;
  return s;
}

}  // namespace

struct HttpListener::Listening {
  std::optional<ListenSocket> socket;  // a Unix socket's file, removed when it goes
  kj::Own<kj::ConnectionReceiver> receiver;
  bool tcp = false;
  std::string description;
  kj::Promise<void> accepting = nullptr;
};

struct HttpListener::Connection {
  HttpPeer peer;
  HttpService* service = nullptr;  // owned by the HttpServer while the connection lasts
  kj::Own<kj::PromiseFulfiller<void>> evict;
};

HttpListener::HttpListener(DaemonCore& core, BackgroundThreads& background, kj::AsyncIoProvider& io,
                           kj::LowLevelAsyncIoProvider& lowLevel, kj::UnixEventPort& eventPort, kj::Timer& timer)
    : core_(core),
      io_(io),
      lowLevel_(lowLevel),
      timer_(timer),
      shared_(std::make_unique<HttpShared>(
          core, background, eventPort, timer,
          core.config().httpTokenFile.empty() ? BearerTokens() : BearerTokens::load(core.config().httpTokenFile))),
      server_(
          timer, *shared_->headerTable,
          [this](kj::AsyncIoStream& stream) -> kj::Own<kj::HttpService> {
            KJ_ASSERT(admitting_ != nullptr);
            auto service = kj::heap<HttpService>(*shared_, admitting_->peer, stream);
            admitting_->service = service.get();
            return service;
          },
          settingsFrom(core.config())),
      tasks_(errorHandler_) {}

HttpListener::~HttpListener() = default;

kj::Promise<void> HttpListener::listen(const std::string& text) {
  const HttpAddress address = HttpAddress::parse(text);
  if (address.unix) {
    // As the RPC socket: the system service's group may connect; a user's daemon, that user only.
    ListenSocket socket = ListenSocket::create(address.path, ::geteuid() == 0 ? 0660 : 0600);
    auto receiver = lowLevel_.wrapListenSocketFd(socket.fd());
    auto l = kj::heap<Listening>();
    l->socket.emplace(std::move(socket));
    l->receiver = kj::mv(receiver);
    l->description = text;
    Listening& ref = *l;
    listening_.push_back(kj::mv(l));
    ref.accepting = acceptLoop(ref).eagerlyEvaluate(nullptr);
    spdlog::info("http: listening on {}", text);
    return kj::READY_NOW;
  }
  return io_.getNetwork().parseAddress(address.hostPort).then([this, text](kj::Own<kj::NetworkAddress> addr) {
    const std::string resolved = addr->toString().cStr();
    JITLLM_REQUIRE(isLoopback(resolved) || !shared_->tokens.empty(), "http address '", text, "' (", resolved,
                   ") is not a loopback address: serving it needs http_token_file (--http-token-file), or anyone "
                   "who can reach it could use the daemon");
    serve(addr->listen(), true, resolved);
  });
}

void HttpListener::adopt(ListenSocket socket) {
  auto receiver = lowLevel_.wrapListenSocketFd(socket.fd());
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const bool tcp = ::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family != AF_UNIX;
  auto l = kj::heap<Listening>();
  l->socket.emplace(std::move(socket));
  l->receiver = kj::mv(receiver);
  l->tcp = tcp;
  l->description = tcp ? "a TCP socket from systemd" : "a Unix socket from systemd";
  Listening& ref = *l;
  listening_.push_back(kj::mv(l));
  ref.accepting = acceptLoop(ref).eagerlyEvaluate(nullptr);
  spdlog::info("http: listening on {}", ref.description);
}

void HttpListener::serve(kj::Own<kj::ConnectionReceiver> receiver, bool tcp, std::string description) {
  auto l = kj::heap<Listening>();
  l->receiver = kj::mv(receiver);
  l->tcp = tcp;
  l->description =
      tcp ? description.substr(0, description.rfind(':')) + ":" + std::to_string(l->receiver->getPort()) : description;
  Listening& ref = *l;
  listening_.push_back(kj::mv(l));
  ref.accepting = acceptLoop(ref).eagerlyEvaluate(nullptr);
  spdlog::info("http: listening on {}", ref.description);
}

void HttpListener::setReady() { shared_->ready = true; }

void HttpListener::stopAccepting() {
  shared_->draining = true;
  for (auto& l : listening_) {
    l->accepting = kj::READY_NOW;
    l->receiver = nullptr;
    // A Unix socket's descriptor is the ListenSocket's: closing it is what makes new clients see
    // ECONNREFUSED rather than wait in the backlog of a listener nobody accepts from.
    l->socket.reset();
  }
}

kj::Promise<void> HttpListener::acceptLoop(Listening& l) {
  const bool tcp = l.tcp;
  return kj::evalNow([&l] { return l.receiver->acceptAuthenticated(); })
      .then(
          [this, &l, tcp](kj::AuthenticatedStream&& accepted) {
            admit(kj::mv(accepted), tcp);
            return acceptLoop(l);
          },
          [this, &l](kj::Exception&& e) {
            // Descriptors spent (EMFILE) or another accept error: clients wait in the backlog.
            spdlog::warn("http: accepting a connection failed ({} open): {}", connections_.size(),
                         e.getDescription().cStr());
            return timer_.afterDelay(100 * kj::MILLISECONDS).then([this, &l] { return acceptLoop(l); });
          });
}

bool HttpListener::evictIdle() {
  for (auto& c : connections_) {
    if (c.service != nullptr && !c.service->busy() && c.evict) {
      c.evict->fulfill();
      c.evict = nullptr;
      return true;
    }
  }
  return false;
}

void HttpListener::admit(kj::AuthenticatedStream&& accepted, bool tcp) {
  HttpPeer peer;
  peer.tcp = tcp;
  if (auto* local = dynamic_cast<kj::LocalPeerIdentity*>(accepted.peerIdentity.get())) {
    auto creds = local->getCredentials();
    KJ_IF_MAYBE (uid, creds.uid) {
      peer.credentials.uid = *uid;
    } else {
      spdlog::warn("http: refusing a connection whose peer credentials are unknown");
      return;
    }
    KJ_IF_MAYBE (pid, creds.pid) {
      peer.credentials.pid = *pid;
    }
  } else if (auto* network = dynamic_cast<kj::NetworkPeerIdentity*>(accepted.peerIdentity.get())) {
    peer.tcp = true;
    peer.address = network->getAddress().toString().cStr();
    if (shared_->tokens.empty() && !isLoopback(peer.address)) {
      spdlog::warn("http: refusing {}: not loopback, and no http_token_file", peer.address);
      return;
    }
  } else {
    // Sockets systemd passed come without KJ's identity: over TCP they are treated as above.
    peer.tcp = true;
  }
  KJ_IF_MAYBE (fd, accepted.stream->getFd()) {
    peer.fd = *fd;
  }
  const size_t limit = core_.config().httpMaxConnections;
  if (connections_.size() >= limit && !evictIdle()) {
    spdlog::warn("http: refusing a connection: all {} (http_max_connections) are busy", limit);
    return;
  }
  connections_.push_back(Connection{peer, nullptr, {}});
  auto position = std::prev(connections_.end());
  auto evicted = kj::newPromiseAndFulfiller<void>();
  position->evict = kj::mv(evicted.fulfiller);
  admitting_ = &*position;
  auto served = server_.listenHttp(kj::mv(accepted.stream));
  admitting_ = nullptr;
  tasks_.add(served.exclusiveJoin(kj::mv(evicted.promise))
                 .then([this, position] { connections_.erase(position); },
                       [this, position](kj::Exception&& e) {
                         connections_.erase(position);
                         kj::throwFatalException(kj::mv(e));
                       }));
}

}  // namespace jitllm::server::http
