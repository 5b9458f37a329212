#include "daemon/server/background_threads.h"

#include <sys/resource.h>
#include <unistd.h>

namespace jitllm::server {

BackgroundThreads::BackgroundThreads(size_t shortWorkers) {
  for (size_t i = 0; i < std::max<size_t>(1, shortWorkers); i++) workers_.emplace_back([this] { workerLoop(); });
}

void BackgroundThreads::startThread(std::function<void()> task) {
  std::vector<std::thread> finished;
  auto done = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mutex_);
    // Threads that have returned are joined here, not at the end: a daemon that loads and unloads
    // models for weeks keeps no dead thread.
    std::erase_if(dedicated_, [&](Dedicated& d) {
      if (!d.done->load()) return false;
      finished.push_back(std::move(d.thread));
      return true;
    });
    dedicated_.push_back({std::thread([task = std::move(task), done] {
                            task();
                            done->store(true);
                          }),
                          done});
  }
  for (std::thread& t : finished) t.join();
}

void BackgroundThreads::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  queued_.notify_one();
}

void BackgroundThreads::workerLoop() {
  // Linux gives each thread its own nice value (setpriority on the thread id); raising it needs no
  // privilege. If it fails the work still runs, at the daemon's priority.
  ::setpriority(PRIO_PROCESS, ::gettid(), kShortWorkNice);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void BackgroundThreads::joinAll() {
  std::vector<Dedicated> dedicated;
  std::vector<std::thread> workers;
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dedicated.swap(dedicated_);
    workers.swap(workers_);
    dropped.swap(queue_);  // destroyed outside the lock: their promises reject
  }
  queued_.notify_all();
  for (auto& d : dedicated) d.thread.join();
  for (auto& t : workers) t.join();
}

}  // namespace jitllm::server
