// Accepts client connections on the listening socket and gives each its own Daemon capability,
// bound to the connecting process's credentials (SO_PEERCRED, through KJ's LocalPeerIdentity).
//
// Each connection is a Cap'n Proto two-party RPC session over a stream that can carry one file
// descriptor per message (how `load` receives a model file). Messages are bounded
// (kMaxMessageWords) so an oversized or malformed message fails that connection only.
//
// Ownership: owns the listener and every connection; borrows the core.
// Thread-safety: RPC (KJ) thread only.
#pragma once

#include <kj/async-io.h>
#include <kj/async.h>

#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"

namespace jitllm::server {

class RpcListener final {
 public:
  // 64 MiB: far above any real request (a 100k-token prompt is ~400 KB), far below harm.
  static constexpr uint64_t kMaxMessageWords = 8 * 1024 * 1024;

  RpcListener(DaemonCore& core, BackgroundThreads& background, kj::LowLevelAsyncIoProvider& lowLevel, int listenFd);
  ~RpcListener();

  // Stops taking new connections; existing ones continue.
  void stopAccepting();
  size_t connectionCount() const { return connections_; }

 private:
  struct Connection;
  kj::Promise<void> acceptLoop();

  DaemonCore& core_;
  BackgroundThreads& background_;
  kj::Own<kj::ConnectionReceiver> listener_;
  kj::TaskSet tasks_;
  kj::Promise<void> accepting_;
  size_t connections_ = 0;
  struct ErrorHandler final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };
  static ErrorHandler errorHandler_;
};

}  // namespace jitllm::server
