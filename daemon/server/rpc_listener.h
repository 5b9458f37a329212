// Accepts client connections on the listening socket and gives each its own Daemon capability,
// bound to the connecting process's credentials (SO_PEERCRED, through KJ's LocalPeerIdentity).
//
// Each connection is a Cap'n Proto two-party RPC session over a stream that can carry one file
// descriptor per message (how `load` receives a model file). What one local user can do to the
// others is bounded here (docs/operations.md, "Limits"):
//  - messages are at most kMaxMessageWords, and the bytes of unfinished messages over all
//    connections at most max_inflight_bytes (GuardedStream): past either, that connection fails;
//  - a connection must send its first message within handshake_timeout_ms, finish a message it
//    began within message_timeout_ms, and is closed after idle_timeout_ms of silence with nothing
//    in flight (no reply being generated, no event subscription);
//  - a user who is not an admin holds at most max_connections_per_uid connections;
//  - running out of descriptors (EMFILE, ENFILE) or any other accept error pauses accepting
//    briefly and goes on: new clients wait, they are not refused for good.
//
// Ownership: owns the listener and every connection; borrows the core and the timer.
// Thread-safety: RPC (KJ) thread only.
#pragma once

#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/timer.h>

#include <map>
#include <memory>

#include "daemon/server/reply_wakeups.h"
#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"
#include "daemon/server/guarded_stream.h"

namespace jitllm::server {

class RpcListener final {
 public:
  // 16 MiB: far above any real request (a 100k-token prompt is ~400 KB; a model travels as a
  // descriptor, not bytes), far below harm.
  static constexpr uint64_t kMaxMessageWords = 2 * 1024 * 1024;
  // After an accept error, wait this long before the next accept, doubling up to the maximum.
  static constexpr kj::Duration kAcceptBackoffMin = 10 * kj::MILLISECONDS;
  static constexpr kj::Duration kAcceptBackoffMax = 1 * kj::SECONDS;
  // Connections open at once past which their memory is handed back to the system (malloc_trim)
  // when most have closed: a connection costs ~12 KB, so below this it is not worth the call.
  static constexpr size_t kTrimAfterConnections = 256;

  RpcListener(DaemonCore& core, BackgroundThreads& background, kj::LowLevelAsyncIoProvider& lowLevel, kj::Timer& timer,
              int listenFd);
  ~RpcListener();

  // Stops taking new connections; existing ones continue.
  void stopAccepting();
  size_t connectionCount() const { return connections_; }

 private:
  struct Connection;
  kj::Promise<void> acceptLoop();
  void admit(kj::AuthenticatedStream&& accepted);
  // Resolves when `c` should be closed (a timeout), after logging why.
  kj::Promise<void> watch(Connection& c);

  DaemonCore& core_;
  BackgroundThreads& background_;
  kj::Timer& timer_;
  ReplyWakeups wakeups_;  // before tasks_: the connections' replies hold its promises
  kj::Own<kj::ConnectionReceiver> listener_;
  std::shared_ptr<InflightBudget> inflight_;
  kj::TaskSet tasks_;
  kj::Promise<void> accepting_;
  kj::Duration backoff_ = kAcceptBackoffMin;
  size_t connections_ = 0;
  size_t peakConnections_ = 0;         // the most open at once since the last trim
  std::map<uint32_t, size_t> perUid_;  // open connections by user
  struct ErrorHandler final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };
  static ErrorHandler errorHandler_;
};

}  // namespace jitllm::server
