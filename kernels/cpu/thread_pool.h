// A fixed set of worker threads that run one data-parallel loop at a time.
//
// Decode on small models issues thousands of tiny parallel loops per second, so the hand-off must
// cost microseconds: workers spin briefly on a generation counter before sleeping on it
// (std::atomic::wait), and the calling thread takes a share of the work itself.
//
// Work split: parallelFor hands thread i the contiguous range i of n, so which thread computes
// an index depends only on n and the thread count, never on timing.
//
// Ownership: owns its threads; joins them on destruction.
// Thread-safety: parallelFor may be called by one thread at a time (the owning device's
// executor); the function it runs is called concurrently from all threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace jitllm::cpu {

class ThreadPool final {
 public:
  explicit ThreadPool(int threads);  // threads >= 1; threads-1 workers plus the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threadCount_; }

  // Calls fn(begin, end) over a partition of [0, n) into at most threads() contiguous ranges,
  // none smaller than minChunk (except when n itself is smaller), and returns when all are done.
  // An exception thrown by fn is rethrown here after every range has finished.
  void parallelFor(int64_t n, int64_t minChunk, const std::function<void(int64_t, int64_t)>& fn);

 private:
  // Spins this many times checking for work before sleeping: about the cost of one step's gap
  // between two ops, so back-to-back ops never pay a futex wake-up.
  static constexpr int kSpinIterations = 20000;

  void workerLoop(int index);
  void runShare(int index);

  int threadCount_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // The current loop; written before generation_ is bumped, read after it is seen.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int shares_ = 0;
  std::exception_ptr error_;
  std::atomic<bool> hasError_{false};
};

}  // namespace jitllm::cpu
