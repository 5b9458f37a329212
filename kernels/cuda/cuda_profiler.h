// Where a CUDA device's time goes, for tuning runs (docs/cuda.md), never for measuring throughput:
// - JITLLM_CUDA_PROFILE=1 (ops()): the op queue submits each launch at once between two timing
//   events, no graphs, and its GPU time is added to its op's line;
// - JITLLM_CUDA_GRAPH_TIMES=1 (graphs()): each graph launch timed so (the GPU's time for a whole
//   step, to set against the wall-clock time of a token: the difference is the host's part), and
//   the host's parts of each read-back: its flush, waiting for the GPU, the copy, and the time
//   from a read-back to the next flush (building the next step's queue).
// The lines are printed to stderr by report(), when the device goes away.
//
// Ownership: owns its timing events; borrows the context. Thread-safety: timed() and collect()
// from the thread that submits (the executor, or another thread's flush, which the op queue's
// lock orders); the host times under a lock of their own, from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_context.h"

namespace jitllm::cuda {

class CudaProfiler final {
 public:
  using Clock = std::chrono::steady_clock;

  CudaProfiler(const CudaContext& ctx, bool ops, bool graphs) : ctx_(ctx), ops_(ops), graphs_(graphs) {}
  ~CudaProfiler();
  CudaProfiler(const CudaProfiler&) = delete;
  CudaProfiler& operator=(const CudaProfiler&) = delete;

  bool ops() const { return ops_; }
  bool graphs() const { return graphs_; }
  bool any() const { return ops_ || graphs_; }

  // Queues run() between two events whose elapsed time collect() adds to op's.
  void timed(std::string op, const std::function<void()>& run);
  // Adds the times of everything timed so far; the stream has run it.
  void collect();

  // The host's parts of a step (graphs() only). A read-back flushed from flushStart on: the flush
  // and then waiting for the GPU (this synchronises the stream).
  void readBackFlushed(Clock::time_point flushStart);
  // Its copy, begun at copyStart, is done: a step ends here.
  void readBackCopied(Clock::time_point copyStart);
  // A flush begins: the time since the last read-back built this queue.
  void flushBegins();

  // Prints the op times and the host's parts to stderr, when any were asked for.
  void report() const;

 private:
  struct OpTime {
    int64_t calls = 0;
    double seconds = 0;
  };
  struct Profiled {
    std::string op;
    CUevent start, end;
  };
  struct HostTimes {
    double flush = 0, waitGpu = 0, copy = 0, build = 0;  // seconds
    int64_t reads = 0, builds = 0;
    std::optional<Clock::time_point> lastRead;
  };

  const CudaContext& ctx_;
  const bool ops_, graphs_;
  std::map<std::string, OpTime> times_;
  std::vector<Profiled> profiled_;  // launched, not yet read back
  std::vector<CUevent> eventPool_;
  std::mutex hostMutex_;  // hostTimes_: a flush may run on another thread
  HostTimes hostTimes_;
};

}  // namespace jitllm::cuda
