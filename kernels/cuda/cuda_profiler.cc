#include "kernels/cuda/cuda_profiler.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace jitllm::cuda {

CudaProfiler::~CudaProfiler() {
  for (const Profiled& p : profiled_) {
    ctx_.api.cuEventDestroy(p.start);
    ctx_.api.cuEventDestroy(p.end);
  }
  for (CUevent e : eventPool_) ctx_.api.cuEventDestroy(e);
}

void CudaProfiler::timed(std::string op, const std::function<void()>& run) {
  Profiled p{std::move(op), nullptr, nullptr};
  for (CUevent* e : {&p.start, &p.end}) {
    if (eventPool_.empty()) {
      ctx_.check(ctx_.api.cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate (profile)");
    } else {
      *e = eventPool_.back();
      eventPool_.pop_back();
    }
  }
  ctx_.check(ctx_.api.cuEventRecord(p.start, ctx_.stream), "cuEventRecord");
  run();
  ctx_.check(ctx_.api.cuEventRecord(p.end, ctx_.stream), "cuEventRecord");
  profiled_.push_back(std::move(p));
}

void CudaProfiler::collect() {
  for (const Profiled& p : profiled_) {
    float ms = 0;
    ctx_.check(ctx_.api.cuEventElapsedTime(&ms, p.start, p.end), "cuEventElapsedTime");
    OpTime& t = times_[p.op];
    t.calls++;
    t.seconds += double(ms) / 1e3;
    eventPool_.push_back(p.start);
    eventPool_.push_back(p.end);
  }
  profiled_.clear();
}

void CudaProfiler::readBackFlushed(Clock::time_point flushStart) {
  // The host's part of a step: what it did since the last read-back, the flush (a graph found
  // and launched), and the wait for the GPU.
  const auto t0 = Clock::now();
  ctx_.synchronize();
  const auto t1 = Clock::now();
  std::lock_guard lock(hostMutex_);
  hostTimes_.flush += std::chrono::duration<double>(t0 - flushStart).count();
  hostTimes_.waitGpu += std::chrono::duration<double>(t1 - t0).count();
  hostTimes_.reads++;
}

void CudaProfiler::readBackCopied(Clock::time_point copyStart) {
  std::lock_guard lock(hostMutex_);
  hostTimes_.lastRead = Clock::now();
  hostTimes_.copy += std::chrono::duration<double>(*hostTimes_.lastRead - copyStart).count();
}

void CudaProfiler::flushBegins() {
  std::lock_guard lock(hostMutex_);
  if (!hostTimes_.lastRead) return;
  hostTimes_.build += std::chrono::duration<double>(Clock::now() - *hostTimes_.lastRead).count();
  hostTimes_.lastRead.reset();
  hostTimes_.builds++;
}

void CudaProfiler::report() const {
  if (any()) {
    double total = 0;
    for (const auto& [op, t] : times_) total += t.seconds;
    std::fprintf(stderr, "%s kernel time by op (GPU time between events around each launch):\n", ctx_.id.c_str());
    for (const auto& [op, t] : times_) {
      std::fprintf(stderr, "  %-28s %8lld calls %10.3f ms %8.2f us/call %5.1f%%\n", op.c_str(), (long long)t.calls,
                   t.seconds * 1e3, t.seconds * 1e6 / double(t.calls), 100.0 * t.seconds / total);
    }
  }
  if (graphs_ && hostTimes_.reads > 0) {
    const HostTimes& h = hostTimes_;
    const double reads = double(h.reads), builds = double(std::max<int64_t>(h.builds, 1));
    std::fprintf(stderr,
                 "%s host per read-back (%lld): its flush %.2f us, waiting for the GPU %.2f us, the copy %.2f us; "
                 "from a read-back to the next flush (%lld): %.2f us\n",
                 ctx_.id.c_str(), (long long)h.reads, h.flush * 1e6 / reads, h.waitGpu * 1e6 / reads,
                 h.copy * 1e6 / reads, (long long)h.builds, h.build * 1e6 / builds);
  }
}

}  // namespace jitllm::cuda
