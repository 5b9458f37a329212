// A fixed set of worker threads that run one data-parallel loop at a time.
//
// Decode on small models issues thousands of tiny parallel loops per second, so the hand-off must
// cost microseconds, and on a shared machine a worker that has lost its core must not hold the
// loop up. So:
//   - the loop is cut into chunks that threads claim one at a time (a compare-and-swap on one
//     word); the caller claims too, so a loop whose workers are asleep or descheduled simply runs
//     on the caller, and 2 threads are never much slower than 1;
//   - idle workers spin (pause) for about kSpinMicros, then yield for about kYieldMicros, then
//     sleep on a futex; the caller makes the wake-up system call only when a worker sleeps.
//
// Work split: fn(begin, end) is called on contiguous chunks of [0, n) whose boundaries depend
// only on n, minChunk and the thread count; which thread runs a chunk depends on timing. Callers
// must therefore compute each index independently of the chunk it falls in (every CPU op does:
// rows of a matmul, tokens of rope, (token, head) pairs of attention), which is what keeps results
// independent of the thread count.
//
// Ownership: owns its threads; joins them on destruction.
// Thread-safety: parallelFor may be called by one thread at a time (the owning device's
// executor); the function it runs is called concurrently from all threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
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

  // Calls fn(begin, end) over a partition of [0, n) into contiguous chunks, none smaller than
  // minChunk (except when n itself is smaller), and returns when all are done. With fewer than
  // two chunks' worth of work it runs fn(0, n) on the caller without touching the workers.
  // An exception thrown by fn is rethrown here after every chunk has finished.
  void parallelFor(int64_t n, int64_t minChunk, const std::function<void(int64_t, int64_t)>& fn);
  // Sends idle workers to sleep now instead of after their spin and yield: for latency-critical
  // host work between loops (a migration's pause) on a machine with few cores, where spinning
  // workers would take the core from it. The next parallelFor wakes them as usual.
  void park();

 private:
  // Idle workers poll for this long before yielding (two back-to-back ops of a decode step are
  // a few microseconds apart; polling costs nothing but the core we would use anyway) ...
  static constexpr int kSpinMicros = 200;
  // ... then yield for this long before sleeping (on a loaded machine a yield gives the core to
  // whoever waits for it while still catching the next op without a futex wake-up).
  static constexpr int kYieldMicros = 2000;
  // Chunks per thread: more balance a thread that lost its core, fewer cost fewer claims.
  static constexpr int kChunksPerThread = 4;

  void workerLoop();
  // Claims and runs chunks of the loop published as `generation` until none is left.
  void runChunks(uint32_t generation);

  int threadCount_;
  std::vector<std::thread> workers_;
  // The futex word: bumped once per loop (and at shutdown).
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> parked_{false};
  // generation (high 32 bits) | chunk count (16 bits) | next unclaimed chunk (low 16 bits).
  std::atomic<uint64_t> work_{0};
  std::atomic<int> chunksDone_{0};
  // The current loop; written before work_ publishes it, read only by a thread holding a claimed
  // chunk of it (which keeps the loop from finishing, so these cannot change under it).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  std::exception_ptr error_;
  std::atomic<bool> hasError_{false};
};

}  // namespace jitllm::cpu
