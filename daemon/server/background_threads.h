// Threads for blocking work started from the RPC loop (loading a model), tracked so the daemon
// can wait for them before it tears down what they use.
//
// run() returns a kj::Promise fulfilled on the calling (KJ) thread when the work finishes; if the
// promise is dropped first, the work still completes and its result is discarded.
//
// Thread-safety: run() from the KJ thread; joinAll() from any thread once no more run() calls
// can happen.
#pragma once

#include <kj/async.h>

#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/server/kj_errors.h"

namespace jitllm::server {

class BackgroundThreads final {
 public:
  ~BackgroundThreads() { joinAll(); }

  template <typename T>
  kj::Promise<T> run(std::function<T()> work) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<T>();
    // std::function needs copyable captures; the fulfiller may be used and dropped on any thread.
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<T>>>(kj::mv(paf.fulfiller));
    std::lock_guard lock(mutex_);
    threads_.emplace_back([fulfiller, work = std::move(work)]() mutable {
      try {
        (*fulfiller)->fulfill(work());
      } catch (...) {
        (*fulfiller)->reject(currentAsKjException());
      }
    });
    return kj::mv(paf.promise);
  }

  void joinAll() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

}  // namespace jitllm::server
