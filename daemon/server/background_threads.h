// Threads for work the event loop must not do itself, tracked so the daemon can wait for them
// before it tears down what they use. Two kinds:
//
//   run()   blocking work that may take seconds (loading a model): a thread of its own, joined as
//           soon as a later run() finds it done, so finished threads do not pile up;
//   post()  short CPU work a request needs before it can be queued (rendering a chat template,
//           tokenizing a prompt): a fixed set of workers takes it in order, at a lower CPU
//           priority, so a long prompt costs one worker for a while and never the event loop or a
//           stream's pace, and a burst of requests cannot start a thread each.
//
// Both return a kj::Promise fulfilled on the calling (KJ) thread when the work finishes; if the
// promise is dropped first, the work still completes and its result is discarded. An exception
// the work throws rejects the promise (kj_errors.h's translation).
//
// Thread-safety: run() and post() from the KJ thread; joinAll() from any thread once no more
// run() or post() calls can happen.
#pragma once

#include <kj/async.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/server/kj_errors.h"

namespace jitllm::server {

class BackgroundThreads final {
 public:
  // Workers for post(): enough that a few long prompts leave room for short ones.
  static constexpr size_t kShortWorkers = 4;
  // Their nice value: preparing a new prompt yields the CPU to the replies already streaming (the
  // model workers and the event loop run at the daemon's own priority). On a saturated CPU a new
  // prompt waits a little longer for its tokens rather than every stream for its next one; on an
  // idle core it changes nothing.
  static constexpr int kShortWorkNice = 10;

  explicit BackgroundThreads(size_t shortWorkers = kShortWorkers);
  ~BackgroundThreads() { joinAll(); }
  BackgroundThreads(const BackgroundThreads&) = delete;
  BackgroundThreads& operator=(const BackgroundThreads&) = delete;

  template <typename T>
  kj::Promise<T> run(std::function<T()> work) {
    auto [promise, task] = package(std::move(work));
    startThread(std::move(task));
    return kj::mv(promise);
  }

  template <typename T>
  kj::Promise<T> post(std::function<T()> work) {
    auto [promise, task] = package(std::move(work));
    enqueue(std::move(task));
    return kj::mv(promise);
  }

  // Stops the workers (work queued and not started is dropped: its promise rejects) and joins
  // every thread.
  void joinAll();

 private:
  // `work` as a task any thread may run once, and the promise its result fulfils.
  template <typename T>
  static std::pair<kj::Promise<T>, std::function<void()>> package(std::function<T()> work) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<T>();
    // std::function needs copyable captures; the fulfiller may be used and dropped on any thread.
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<T>>>(kj::mv(paf.fulfiller));
    std::function<void()> task = [fulfiller, work = std::move(work)]() mutable {
      try {
        (*fulfiller)->fulfill(work());
      } catch (...) {
        (*fulfiller)->reject(currentAsKjException());
      }
    };
    return {kj::mv(paf.promise), std::move(task)};
  }
  void startThread(std::function<void()> task);
  void enqueue(std::function<void()> task);
  void workerLoop();

  struct Dedicated {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mutex_;
  std::condition_variable queued_;
  std::vector<Dedicated> dedicated_;         // run()'s threads (guarded by mutex_)
  std::deque<std::function<void()>> queue_;  // post()'s work not yet taken (guarded by mutex_)
  bool stopping_ = false;                    // guarded by mutex_
  std::vector<std::thread> workers_;         // post()'s workers, made at construction
};

}  // namespace jitllm::server
