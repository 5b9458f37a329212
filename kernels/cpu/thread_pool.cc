#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <immintrin.h>

#include "kernels/error.h"

namespace jitllm::cpu {

ThreadPool::ThreadPool(int threads) : threadCount_(std::max(1, threads)) {
  workers_.reserve(size_t(threadCount_ - 1));
  for (int i = 1; i < threadCount_; i++) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::runShare(int index) {
  if (index >= shares_) return;
  const int64_t begin = n_ * index / shares_;
  const int64_t end = n_ * (index + 1) / shares_;
  try {
    (*fn_)(begin, end);
  } catch (...) {
    bool expected = false;
    if (hasError_.compare_exchange_strong(expected, true)) error_ = std::current_exception();
  }
}

void ThreadPool::workerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIterations; spin++) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    runShare(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t minChunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  minChunk = std::max<int64_t>(1, minChunk);
  const int shares = int(std::min<int64_t>(threadCount_, std::max<int64_t>(1, n / minChunk)));
  if (shares == 1) {
    fn(0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  shares_ = shares;
  error_ = nullptr;
  hasError_.store(false, std::memory_order_relaxed);
  pending_.store(threadCount_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  runShare(0);
  // Spin while the workers are likely running; if one is not (the machine is busier than our
  // thread count), give it the core instead of burning our time slice.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; spin++) {
    if (spin < kSpinIterations) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
  if (hasError_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
}

}  // namespace jitllm::cpu
