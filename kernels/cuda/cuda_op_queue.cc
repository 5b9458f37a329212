#include "kernels/cuda/cuda_op_queue.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>

namespace jitllm::cuda {

bool Command::operator==(const Command& o) const {
  return kernel == o.kernel && gridX == o.gridX && gridY == o.gridY && block == o.block &&
         sharedBytes == o.sharedBytes && paramBytes == o.paramBytes &&
         std::memcmp(params.data(), o.params.data(), paramBytes) == 0 && copyTo == o.copyTo && copyFrom == o.copyFrom &&
         copyBytes == o.copyBytes;
}

CudaOpQueue::CudaOpQueue(const CudaContext& ctx, CudaProfiler& profiler, const ResolvedCudaSettings& settings)
    : ctx_(ctx),
      profiler_(profiler),
      ring_(ctx),
      offersFusion_(settings.integerMatmul && settings.fuse),
      programmaticLaunch_(settings.programmaticLaunch && ctx.arch >= 90 && ctx.api.cuLaunchKernelEx != nullptr),
      graphsEnabled_(settings.graphs),
      skipOps_(settings.skipOps),
      earlySubmitCommands_(settings.earlySubmitCommands),
      earlySubmitGrowth_(settings.earlySubmitGrowth),
      nextPartCommands_(settings.earlySubmitCommands) {}

CudaOpQueue::~CudaOpQueue() { dropGraphs(); }

size_t CudaOpQueue::enqueue(const char* op, const Command& c) {
  fusion_.commandQueued();
  if (!skipOps_.empty() && opTokens_ <= kProgrammaticMaxTokens) [[unlikely]] {
    for (const std::string& skip : skipOps_) {
      if (std::string_view(op).starts_with(skip)) return kNotQueued;
    }
  }
  if (profiler_.ops()) [[unlikely]] {
    const bool programmatic = programmaticFor(opTokens_);
    // Each launch at once, between two timing events: the GPU's own time for it, read back at
    // the next synchronisation (CudaProfiler::collect).
    profiler_.timed(op, [&] { submit({c}, programmatic); });
    return kNotQueued;
  }
  std::lock_guard lock(pendingMutex_);
  pending_.push_back(c);
  queueTokens_ = std::max(queueTokens_, opTokens_);
  return pending_.size() - 1;
}

CudaOpQueue::Staged CudaOpQueue::stage(size_t bytes) {
  bytes = roundUp(std::max<size_t>(bytes, 1), kAllocationGranule);
  if (!ring_.holds(bytes)) {
    // A description larger than half the ring (a huge batch): grow it once everything queued ran.
    flush();
    ctx_.synchronize();
    dropGraphs();  // they copy from the old ring
    ring_.grow(bytes);
  }
  if (!ring_.fitsInHalf(bytes)) {
    flush();  // the half's event must follow the copies queued from it
    ring_.enterOtherHalf();
  }
  return ring_.take(bytes);
}

void CudaOpQueue::commit(const Staged& s) {
  Command c;
  c.copyTo = s.device;
  c.copyFrom = s.host;
  c.copyBytes = s.bytes;
  enqueue("copy", c);
}

bool CudaOpQueue::replaceIfLastQueued(size_t index, const Command& expected, const Command& replacement) {
  std::lock_guard lock(pendingMutex_);
  if (index + 1 != pending_.size() || !(pending_[index] == expected)) return false;
  pending_[index] = replacement;
  return true;
}

void CudaOpQueue::offerFusion(size_t index, const Command& c, const float* out, int64_t elements,
                              std::function<std::optional<Command>(CUdeviceptr, uint64_t, int)> fused) {
  if (!offersFusion_ || index == kNotQueued) return;
  fusion_.producer = {index, c, out, elements, std::move(fused)};
}

void CudaOpQueue::submit(const std::vector<Command>& commands, bool programmatic) {
  const DriverApi& api = ctx_.api;
  for (const Command& c : commands) {
    if (!c.kernel) {
      ctx_.check(api.cuMemcpyHtoDAsync(c.copyTo, c.copyFrom, c.copyBytes, ctx_.stream), "cuMemcpyHtoDAsync");
      continue;
    }
    size_t bytes = c.paramBytes;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<uint8_t*>(c.params.data()), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &bytes, CU_LAUNCH_PARAM_END};
    if (programmatic) {
      // Every kernel begins with griddepcontrol.wait (common.cuh: awaitPreviousKernel), so it may
      // be scheduled before the kernel ahead of it in the stream has finished; in a captured graph
      // this becomes a programmatic edge.
      CUlaunchAttribute attribute{};
      attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attribute.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig config{};
      config.gridDimX = c.gridX, config.gridDimY = c.gridY, config.gridDimZ = 1;
      config.blockDimX = c.block, config.blockDimY = 1, config.blockDimZ = 1;
      config.sharedMemBytes = c.sharedBytes;
      config.hStream = ctx_.stream;
      config.attrs = &attribute;
      config.numAttrs = 1;
      ctx_.check(api.cuLaunchKernelEx(&config, c.kernel, nullptr, extra), "cuLaunchKernelEx");
      continue;
    }
    ctx_.check(
        api.cuLaunchKernel(c.kernel, c.gridX, c.gridY, 1, c.block, 1, 1, c.sharedBytes, ctx_.stream, nullptr, extra),
        "cuLaunchKernel");
  }
}

void CudaOpQueue::launchGraph(const Graph& g) {
  const auto run = [&] { ctx_.check(ctx_.api.cuGraphLaunch(g.exec, ctx_.stream), "cuGraphLaunch"); };
  if (profiler_.graphs()) [[unlikely]] {
    profiler_.timed("graph of " + std::to_string(g.commands.size()) + " commands", run);
  } else {
    run();
  }
  graphLaunches_++;
}

void CudaOpQueue::dropGraphs() {
  std::lock_guard lock(pendingMutex_);
  for (Graph& g : graphs_) ctx_.api.cuGraphExecDestroy(g.exec);
  graphs_.clear();
  recentlySubmitted_.clear();
}

void CudaOpQueue::coalesceStagedCopies(std::vector<Command>& commands) const {
  // The ops' descriptions were staged back to back in the ring, all written before this flush, and
  // no part of the ring is used twice in one queue: one copy of the whole range, ahead of every
  // kernel, replaces a copy per op (each a PCIe round trip the kernels after it waited for).
  size_t lo = SIZE_MAX, hi = 0, staged = 0;
  for (const Command& c : commands) {
    if (c.kernel || !ring_.isMirrorCopy(c.copyTo, c.copyFrom)) continue;
    lo = std::min(lo, size_t(c.copyFrom - ring_.host()));
    hi = std::max(hi, size_t(c.copyFrom - ring_.host()) + c.copyBytes);
    staged++;
  }
  if (staged < 2) return;
  std::erase_if(commands, [&](const Command& c) { return !c.kernel && ring_.isMirrorCopy(c.copyTo, c.copyFrom); });
  Command all;
  all.copyTo = ring_.device() + lo;
  all.copyFrom = ring_.host() + lo;
  all.copyBytes = hi - lo;
  commands.insert(commands.begin(), all);
}

void CudaOpQueue::flush() {
  std::lock_guard lock(pendingMutex_);
  if (pending_.empty()) return;
  if (profiler_.graphs()) [[unlikely]] {
    profiler_.flushBegins();
  }
  std::vector<Command> commands;
  commands.swap(pending_);
  const bool programmatic = programmaticFor(queueTokens_);
  queueTokens_ = 0;
  coalesceStagedCopies(commands);
  ctx_.makeCurrent();
  flushes_++;
  if (!graphsEnabled_ || commands.size() < kMinGraphCommands) {
    submit(commands, programmatic);
    return;
  }
  for (Graph& g : graphs_) {
    if (g.commands == commands && g.programmatic == programmatic) {
      g.lastUsed = flushes_;
      launchGraph(g);
      return;
    }
  }
  // A queue seen recently (a step's queue, or one part of a step submitted early: matmuls) runs
  // as a graph from its second time on; others run call by call and are remembered.
  const auto seen = std::find(recentlySubmitted_.begin(), recentlySubmitted_.end(), commands);
  if (seen == recentlySubmitted_.end()) {
    submit(commands, programmatic);
    if (recentlySubmitted_.size() == kMaxRecentQueues) recentlySubmitted_.erase(recentlySubmitted_.begin());
    recentlySubmitted_.push_back(std::move(commands));
    return;
  }
  recentlySubmitted_.erase(seen);
  captureGraph(std::move(commands), programmatic);
}

void CudaOpQueue::captureGraph(std::vector<Command> commands, bool programmatic) {
  const DriverApi& api = ctx_.api;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ctx_.check(api.cuStreamBeginCapture(ctx_.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  try {
    submit(commands, programmatic);
  } catch (...) {
    api.cuStreamEndCapture(ctx_.stream, &graph);
    if (graph) api.cuGraphDestroy(graph);
    throw;
  }
  ctx_.check(api.cuStreamEndCapture(ctx_.stream, &graph), "cuStreamEndCapture");
  const CUresult instantiated = api.cuGraphInstantiateWithFlags(&exec, graph, 0);
  api.cuGraphDestroy(graph);
  ctx_.check(instantiated, "cuGraphInstantiate");
  if (graphs_.size() == kMaxGraphs) {
    auto oldest = std::min_element(graphs_.begin(), graphs_.end(),
                                   [](const Graph& a, const Graph& b) { return a.lastUsed < b.lastUsed; });
    api.cuGraphExecDestroy(oldest->exec);
    graphs_.erase(oldest);
  }
  graphs_.push_back({std::move(commands), exec, flushes_, programmatic});
  graphsCaptured_++;
  launchGraph(graphs_.back());
}

void CudaOpQueue::drain() {
  flush();
  ctx_.makeCurrent();
  ctx_.synchronize();
}

void CudaOpQueue::submitEarly() {
  // While the host queues a decode step's ~150 launches (~150 us on the 1B, docs/cuda.md) the GPU
  // would wait for all of them: hand it each part as it is queued, so it runs the first layers
  // while the host queues the rest. Called right after a grouped product, which no later launch
  // fuses into, so no fusion is lost; each part repeats every step and becomes a graph of its own.
  // Parts are at least nextPartCommands_ launches long: earlySubmitCommands_, then growing by
  // earlySubmitGrowth_ each part, reset at the read-back that ends a step.
  if (earlySubmitCommands_ == 0 || opTokens_ > kProgrammaticMaxTokens) return;
  {
    std::lock_guard lock(pendingMutex_);
    if (pending_.size() < nextPartCommands_) return;
  }
  flush();
  earlySubmits_++;
  // With growth, the first part is short, so the GPU starts soon, and later ones longer, since
  // the GPU then has work and each graph boundary costs it time (the host queues a launch ~6x
  // faster than the GPU runs it).
  nextPartCommands_ = std::min(nextPartCommands_ * earlySubmitGrowth_, size_t(1) << 20);
}

}  // namespace jitllm::cuda
