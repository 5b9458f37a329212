// The one place where jitllmd's two event loops meet.
//
// Boost.Asio runs the daemon's own loop (signals, the watchdog and status timers, scheduler
// ticks); KJ runs Cap'n Proto RPC. Neither may touch the other's objects directly. toRpc() runs a
// function on the KJ thread and waits for it; toDaemon() queues a function on the Asio loop.
// Model worker threads talk to the RPC thread through their own GenerationJob/EventMailbox
// wake-ups, which are cross-thread KJ promises as well.
//
// Thread-safety: toRpc() from any thread but the KJ thread itself; toDaemon() from any thread.
#pragma once

#include <kj/async.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <functional>

namespace jitllm::server {

class LoopBridge final {
 public:
  LoopBridge(const kj::Executor& rpcExecutor, boost::asio::io_context& daemonLoop)
      : rpc_(rpcExecutor.addRef()), daemon_(daemonLoop) {}

  void toRpc(std::function<void()> fn) const {
    if (rpc_->isLive()) rpc_->executeSync([&] { fn(); });
  }
  void toDaemon(std::function<void()> fn) const { boost::asio::post(daemon_, std::move(fn)); }

 private:
  kj::Own<const kj::Executor> rpc_;
  boost::asio::io_context& daemon_;
};

}  // namespace jitllm::server
