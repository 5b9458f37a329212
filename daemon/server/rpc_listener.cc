#include "daemon/server/rpc_listener.h"

#include <capnp/rpc-twoparty.h>
#include <spdlog/spdlog.h>

#include "daemon/server/rpc_service.h"

namespace jitllm::server {

RpcListener::ErrorHandler RpcListener::errorHandler_;

void RpcListener::ErrorHandler::taskFailed(kj::Exception&& e) {
  // A connection that ends badly (client vanished, malformed message) is that client's problem.
  spdlog::debug("connection ended: {}", e.getDescription().cStr());
}

struct RpcListener::Connection {
  Connection(kj::Own<kj::AsyncCapabilityStream> s, capnp::Capability::Client bootstrap)
      : stream(kj::mv(s)),
        network(*stream, 1, capnp::rpc::twoparty::Side::SERVER, readerOptions()),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}

  static capnp::ReaderOptions readerOptions() {
    capnp::ReaderOptions o;
    o.traversalLimitInWords = kMaxMessageWords;
    o.nestingLimit = 64;
    return o;
  }

  kj::Own<kj::AsyncCapabilityStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

RpcListener::RpcListener(DaemonCore& core, BackgroundThreads& background, kj::LowLevelAsyncIoProvider& lowLevel,
                         int listenFd)
    : core_(core),
      background_(background),
      listener_(lowLevel.wrapListenSocketFd(listenFd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP)),
      tasks_(errorHandler_),
      accepting_(acceptLoop().eagerlyEvaluate(
          [](kj::Exception&& e) { spdlog::error("accepting connections failed: {}", e.getDescription().cStr()); })) {}

RpcListener::~RpcListener() = default;

void RpcListener::stopAccepting() {
  accepting_ = kj::READY_NOW;  // cancels the accept loop
  listener_ = nullptr;         // and closes the socket: new clients get ECONNREFUSED
}

kj::Promise<void> RpcListener::acceptLoop() {
  return listener_->acceptAuthenticated().then([this](kj::AuthenticatedStream&& accepted) {
    PeerCredentials peer;
    bool known = false;
    if (auto* local = dynamic_cast<kj::LocalPeerIdentity*>(accepted.peerIdentity.get())) {
      auto creds = local->getCredentials();
      KJ_IF_MAYBE (uid, creds.uid) {
        peer.uid = *uid;
        known = true;
      }
      KJ_IF_MAYBE (pid, creds.pid) {
        peer.pid = *pid;
      }
    }
    if (!known) {
      spdlog::warn("refusing a connection whose peer credentials are unknown");
    } else {
      // Unix-domain streams from wrapListenSocketFd are capability streams (they can carry fds).
      auto stream = accepted.stream.downcast<kj::AsyncCapabilityStream>();
      auto connection = kj::heap<Connection>(kj::mv(stream), kj::heap<DaemonService>(core_, background_, peer));
      connections_++;
      spdlog::debug("client connected: uid {} pid {}", peer.uid, peer.pid);
      auto& network = connection->network;
      tasks_.add(network.onDisconnect()
                     .attach(kj::mv(connection))
                     .then(
                         [this, peer] {
                           connections_--;
                           spdlog::debug("client disconnected: uid {} pid {}", peer.uid, peer.pid);
                         },
                         [this](kj::Exception&& e) {
                           connections_--;
                           kj::throwFatalException(kj::mv(e));
                         }));
    }
    return acceptLoop();
  });
}

}  // namespace jitllm::server
