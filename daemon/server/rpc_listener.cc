#include "daemon/server/rpc_listener.h"

#include <capnp/rpc-twoparty.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "daemon/server/rpc_service.h"

namespace jitllm::server {

RpcListener::ErrorHandler RpcListener::errorHandler_;

void RpcListener::ErrorHandler::taskFailed(kj::Exception&& e) {
  // A connection that ends badly (client vanished, malformed message) is that client's problem.
  spdlog::debug("connection ended: {}", e.getDescription().cStr());
}

struct RpcListener::Connection {
  Connection(kj::Own<GuardedStream> s, PeerCredentials who, std::shared_ptr<ConnectionActivity> a,
             capnp::Capability::Client bootstrap)
      : stream(kj::mv(s)),
        peer(who),
        activity(std::move(a)),
        network(*stream, 1, capnp::rpc::twoparty::Side::SERVER, readerOptions()),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}

  static capnp::ReaderOptions readerOptions() {
    capnp::ReaderOptions o;
    o.traversalLimitInWords = kMaxMessageWords;
    o.nestingLimit = 64;
    return o;
  }

  kj::Own<GuardedStream> stream;
  PeerCredentials peer;
  std::shared_ptr<ConnectionActivity> activity;
  GuardedStream::Clock::time_point accepted = GuardedStream::Clock::now();
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

RpcListener::RpcListener(DaemonCore& core, BackgroundThreads& background, kj::LowLevelAsyncIoProvider& lowLevel,
                         kj::Timer& timer, int listenFd)
    : core_(core),
      background_(background),
      timer_(timer),
      listener_(lowLevel.wrapListenSocketFd(listenFd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP)),
      inflight_(std::make_shared<InflightBudget>(core.config().maxInflightBytes)),
      tasks_(errorHandler_),
      accepting_(acceptLoop().eagerlyEvaluate(
          [](kj::Exception&& e) { spdlog::error("accepting connections failed: {}", e.getDescription().cStr()); })) {}

RpcListener::~RpcListener() = default;

void RpcListener::stopAccepting() {
  accepting_ = kj::READY_NOW;  // cancels the accept loop
  listener_ = nullptr;         // and closes the socket: new clients get ECONNREFUSED
}

kj::Promise<void> RpcListener::acceptLoop() {
  // evalNow: KJ's accept throws EMFILE synchronously rather than rejecting the promise.
  return kj::evalNow([this] { return listener_->acceptAuthenticated(); })
      .then(
          [this](kj::AuthenticatedStream&& accepted) {
            backoff_ = kAcceptBackoffMin;
            admit(kj::mv(accepted));
            return acceptLoop();
          },
          [this](kj::Exception&& e) {
            // EMFILE / ENFILE (descriptors spent: every connection holds one) or anything else the
            // kernel says: the listener stays, and accepting resumes once connections have closed.
            // Clients meanwhile wait in the listen backlog.
            spdlog::warn("accepting a connection failed ({} open): {}; retrying in {} ms", connections_,
                         e.getDescription().cStr(), backoff_ / kj::MILLISECONDS);
            auto pause = timer_.afterDelay(backoff_);
            backoff_ = std::min(backoff_ * 2, kAcceptBackoffMax);
            return pause.then([this] { return acceptLoop(); });
          });
}

void RpcListener::admit(kj::AuthenticatedStream&& accepted) {
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
    return;
  }
  const DaemonConfig config = core_.config();
  const bool admin = core_.access().isAdmin(peer.uid);
  size_t& mine = perUid_[peer.uid];
  if (!admin && mine >= config.maxConnectionsPerUid) {
    // Closing it is the answer: the client sees its connection end at once.
    spdlog::warn("refusing a connection of uid {} (pid {}): it holds {} already (max_connections_per_uid)", peer.uid,
                 peer.pid, mine);
    return;
  }
  // Unix-domain streams from wrapListenSocketFd are capability streams (they can carry fds).
  auto guarded = kj::heap<GuardedStream>(accepted.stream.downcast<kj::AsyncCapabilityStream>(), inflight_);
  auto activity = std::make_shared<ConnectionActivity>();
  auto connection = kj::heap<Connection>(kj::mv(guarded), peer, activity,
                                         kj::heap<DaemonService>(core_, background_, wakeups_, peer, activity));
  connections_++;
  mine++;
  spdlog::debug("client connected: uid {} pid {}", peer.uid, peer.pid);
  Connection& c = *connection;
  peakConnections_ = std::max(peakConnections_, connections_);
  auto ended = [this, peer] {
    connections_--;
    if (--perUid_[peer.uid] == 0) perUid_.erase(peer.uid);
    // After a storm of connections (thousands held open by one client, say) the allocator keeps
    // what they used; give it back to the system once most of them are gone.
    if (peakConnections_ >= kTrimAfterConnections && connections_ <= peakConnections_ / 4) {
      ::malloc_trim(0);
      peakConnections_ = connections_;
    }
  };
  tasks_.add(c.network.onDisconnect()
                 .exclusiveJoin(watch(c))
                 .attach(kj::mv(connection))
                 .then(
                     [ended, peer] {
                       ended();
                       spdlog::debug("client disconnected: uid {} pid {}", peer.uid, peer.pid);
                     },
                     [ended](kj::Exception&& e) {
                       ended();
                       kj::throwFatalException(kj::mv(e));
                     }));
}

kj::Promise<void> RpcListener::watch(Connection& c) {
  const DaemonConfig config = core_.config();
  using std::chrono::milliseconds;
  const auto now = GuardedStream::Clock::now();
  const char* why = nullptr;
  if (c.stream->bytesRead() == 0 && now - c.accepted > milliseconds(config.handshakeTimeoutMs)) {
    why = "sent nothing within handshake_timeout_ms";
  } else if (c.stream->insideMessage() && now - c.stream->lastRead() > milliseconds(config.messageTimeoutMs)) {
    why = "stalled inside a message for message_timeout_ms";
  } else if (config.idleTimeoutMs > 0 && !c.activity->busy() &&
             now - c.stream->lastActivity() > milliseconds(config.idleTimeoutMs)) {
    why = "was idle for idle_timeout_ms";
  }
  if (why) {
    spdlog::info("closing the connection of uid {} (pid {}): it {}", c.peer.uid, c.peer.pid, why);
    return kj::READY_NOW;
  }
  // Checked a few times per shortest timeout, at least once a second.
  int64_t shortest = std::min(config.handshakeTimeoutMs, config.messageTimeoutMs);
  if (config.idleTimeoutMs > 0) shortest = std::min(shortest, config.idleTimeoutMs);
  const int64_t tickMs = std::clamp<int64_t>(shortest / 4, 5, 1000);
  return timer_.afterDelay(tickMs * kj::MILLISECONDS).then([this, &c] { return watch(c); });
}

}  // namespace jitllm::server
