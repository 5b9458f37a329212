#include "kernels/cpu/thread_pool.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define JITLLM_CPU_RELAX() _mm_pause()
#else
#define JITLLM_CPU_RELAX() ((void)0)
#endif

namespace jitllm::cpu {

namespace {

void futexWait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

constexpr uint64_t packWork(uint32_t generation, uint32_t chunks, uint32_t next) {
  return (uint64_t(generation) << 32) | (uint64_t(chunks) << 16) | next;
}

using Clock = std::chrono::steady_clock;

}  // namespace

ThreadPool::ThreadPool(int threads) : threadCount_(std::max(1, threads)) {
  workers_.reserve(size_t(threadCount_ - 1));
  for (int i = 1; i < threadCount_; i++) workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(generation_);
  for (auto& t : workers_) t.join();
}

void ThreadPool::runChunks(uint32_t generation) {
  uint64_t w = work_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t chunks = uint32_t(w >> 16) & 0xFFFF, next = uint32_t(w) & 0xFFFF;
    if (uint32_t(w >> 32) != generation || next >= chunks) return;
    if (!work_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Chunk `next` of this loop is ours: the loop cannot finish (nor fn_/n_ change) before we
    // count it done.
    const int64_t begin = n_ * next / chunks_, end = n_ * (next + 1) / chunks_;
    try {
      (*fn_)(begin, end);
    } catch (...) {
      bool expected = false;
      if (hasError_.compare_exchange_strong(expected, true)) error_ = std::current_exception();
    }
    chunksDone_.fetch_add(1, std::memory_order_acq_rel);
    w = work_.load(std::memory_order_acquire);
  }
}

void ThreadPool::workerLoop() {
  // Generation 0 is the pool before any loop: a worker that starts late still sees every later
  // generation (including the one of shutdown) as new.
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      // Poll, then yield, then sleep; the clock is read every 64 polls only.
      const Clock::time_point start = Clock::now();
      for (int i = 1; g == seen; i++) {
        if ((i & 63) == 0) {
          const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
          if (elapsed > kSpinMicros + kYieldMicros || parked_.load(std::memory_order_relaxed)) break;
          if (elapsed > kSpinMicros) sched_yield();
        }
        JITLLM_CPU_RELAX();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        // Announce the sleep before re-checking (both seq_cst): the caller either sees us
        // sleeping and wakes us, or we see its new generation and never sleep.
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (generation_.load(std::memory_order_seq_cst) == seen) futexWait(generation_, seen);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        continue;
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    runChunks(g);
  }
}

void ThreadPool::park() { parked_.store(true, std::memory_order_relaxed); }

void ThreadPool::parallelFor(int64_t n, int64_t minChunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  minChunk = std::max<int64_t>(1, minChunk);
  const int64_t byWork = n / minChunk;
  if (threadCount_ == 1 || byWork < 2) {
    fn(0, n);
    return;
  }
  const int chunks = int(std::min<int64_t>({byWork, int64_t(threadCount_) * kChunksPerThread, 0xFFFF}));
  fn_ = &fn;
  n_ = n;
  chunks_ = chunks;
  error_ = nullptr;
  hasError_.store(false, std::memory_order_relaxed);
  chunksDone_.store(0, std::memory_order_relaxed);
  parked_.store(false, std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  work_.store(packWork(generation, uint32_t(chunks), 0), std::memory_order_release);
  generation_.store(generation, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futexWakeAll(generation_);
  runChunks(generation);
  // Every chunk is claimed; wait for those still running elsewhere. If one is on a thread that
  // lost its core, give it ours instead of burning the time slice it needs.
  for (int spin = 0; chunksDone_.load(std::memory_order_acquire) != chunks; spin++) {
    if (spin < 4096) {
      JITLLM_CPU_RELAX();
    } else {
      sched_yield();
    }
  }
  fn_ = nullptr;
  if (hasError_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
}

}  // namespace jitllm::cpu
