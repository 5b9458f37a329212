// The ops of one CUDA device on their way to its stream. Ops are not submitted one by one: each
// launch and each copy out of the staging ring is queued as a Command, and the queue is submitted
// when the host needs a result or orders work against another stream (flush()). A queue identical
// to one submitted lately - a decode step is the same ~300 launches every token: same kernels,
// same buffers, the ring restarted at the same offsets, only the staged bytes differ - is captured
// once as a CUDA graph, and from then on each step is one cuGraphLaunch instead of ~300 driver
// calls (which dominated decode: docs/cuda.md). A flush first merges the copies out of the ring
// into one, and decode queues take programmatic dependent launch where the GPU allows it.
//
// It also keeps what the last queued commands leave for the next op (FusionState): the inputs
// held in another form (integer, fp16), the producer whose launch may write the integer form of
// its output, the add an rmsNorm may take over; any other command queued forgets them.
//
// Ownership: owns the queue, the graphs and the staging ring; borrows the context and the
// profiler. Thread-safety: ops queue from the executor thread only; flush() and dropGraphs() are
// safe from any thread (a buffer freed on another thread flushes), under pendingMutex_.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_profiler.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_staging_ring.h"
#include "kernels/quantized_input.h"

namespace jitllm::cuda {

// One kernel launch, or one copy from pinned host memory (the staging ring) to the device.
struct Command {
  CUfunction kernel = nullptr;  // null: a copy from the ring
  unsigned gridX = 0, gridY = 0, block = 0, sharedBytes = 0;
  uint32_t paramBytes = 0;
  alignas(8) std::array<uint8_t, 160> params{};  // the kernel's parameters, laid out as its ABI does
  CUdeviceptr copyTo = 0;
  const uint8_t* copyFrom = nullptr;  // pinned (the ring), read when the copy runs
  size_t copyBytes = 0;
  bool operator==(const Command& o) const;
};

// Index of a command in the queue; kNotQueued when it was not queued (profiling submitted it at
// once, or JITLLM_CUDA_SKIP left it out).
inline constexpr size_t kNotQueued = ~size_t(0);

// The last op queued, when it produced a float array a product may read next and can write that
// array's integer form as it goes (rms_norm, swiglu and geglu, attention with an xq argument): an
// integer product reading exactly that array swaps the queued command for its fused form instead
// of launching quantize_x. `fused` returns the fused command for activations of `k` columns at xq
// (rows of `stride` bytes), or nothing when the op cannot produce that shape.
struct FusableProducer {
  size_t index = kNotQueued;
  Command command;
  const float* out = nullptr;
  int64_t elements = 0;
  std::function<std::optional<Command>(CUdeviceptr xq, uint64_t stride, int k)> fused;
};

// The last op queued when it was add(x, y): an rmsNorm of x right after replaces it with one
// kernel that adds and normalises (rms_norm's addend).
struct QueuedAdd {
  size_t index = kNotQueued;
  Command command;
  const float* x = nullptr;
  const float* y = nullptr;
  int64_t elements = 0;
};

// What the commands queued last leave for the next op. Executor thread only.
struct FusionState {
  // The input the quantized activations (CudaMatmul) hold while nothing else has been queued
  // since it was quantized - q, k and v (gate and up) read one x and quantize it once - and the
  // input the prompt path holds in fp16 alike. keepQuantized and keepHalf are set while a
  // product queues its own launches, which do not write its input.
  QuantizedInput quantized, half;
  bool keepQuantized = false, keepHalf = false;
  FusableProducer producer;
  QueuedAdd lastAdd;

  // Another command is queued: it may write the held inputs, and comes after the producer and
  // the add.
  void commandQueued() {
    if (!keepQuantized) quantized = {};
    if (!keepHalf) half = {};
    producer = {};
    lastAdd = {};
  }
  // The inputs held in another form may have changed.
  void forgetHeldInputs() {
    quantized = {};
    half = {};
  }
};

// Sets a keep flag of FusionState for its lifetime.
struct KeepInput {
  explicit KeepInput(bool& held) : flag(held) { flag = true; }
  ~KeepInput() { flag = false; }
  KeepInput(const KeepInput&) = delete;
  KeepInput& operator=(const KeepInput&) = delete;
  bool& flag;
};

class CudaOpQueue final {
 public:
  using Staged = StagingRing::Staged;

  // Programmatic dependent launch pays in decode, where a step is ~200 short kernels; in prefill
  // (pp512: 5-7 % slower with it on the H200) it does not. Queues of at most this many tokens
  // per op use it; decode queues are also the ones submitted early and JITLLM_CUDA_SKIP skips in.
  static constexpr int64_t kProgrammaticMaxTokens = 8;

  CudaOpQueue(const CudaContext& ctx, CudaProfiler& profiler, const ResolvedCudaSettings& settings);
  ~CudaOpQueue();
  CudaOpQueue(const CudaOpQueue&) = delete;
  CudaOpQueue& operator=(const CudaOpQueue&) = delete;

  template <typename... A>
  static Command makeLaunch(CUfunction f, unsigned gridX, unsigned gridY, unsigned block, size_t sharedBytes,
                            const A&... args) {
    Command c;
    c.kernel = f;
    c.gridX = gridX;
    c.gridY = gridY;
    c.block = block;
    c.sharedBytes = unsigned(sharedBytes);
    size_t offset = 0;
    auto pack = [&](const auto& a) {
      using T = std::decay_t<decltype(a)>;
      static_assert(std::is_trivially_copyable_v<T>);
      offset = (offset + alignof(T) - 1) / alignof(T) * alignof(T);
      JITLLM_ASSERT(offset + sizeof(T) <= c.params.size());
      std::memcpy(c.params.data() + offset, &a, sizeof(T));
      offset += sizeof(T);
    };
    (pack(args), ...);
    c.paramBytes = uint32_t(offset);
    return c;
  }
  template <typename... A>
  void launch(const char* op, CUfunction f, unsigned gridX, unsigned gridY, unsigned block, size_t sharedBytes,
              const A&... args) {
    enqueue(op, makeLaunch(f, gridX, gridY, block, sharedBytes, args...));
  }
  // Queues c (op names it in profiles); returns its index in the queue, or kNotQueued.
  size_t enqueue(const char* op, const Command& c);

  // Ring space for an op's description; flushes first when the ring must grow or change halves.
  Staged stage(size_t bytes);
  // Queues the copy of s to the device, ahead of the kernels that read it.
  void commit(const Staged& s);

  // Submits what is queued: as a cached graph when one matches, else call by call (capturing it
  // as a graph when it repeats a queue submitted lately). Safe from any thread.
  void flush();
  // Runs the queue and waits for it: nothing queued still reads or writes device memory.
  void drain();
  // Forgets the graphs (memory they refer to is going away). Safe from any thread.
  void dropGraphs();
  // While the host queues a decode step's ~150 launches the GPU would wait for all of them: a
  // part is handed over as soon as it is long enough. Called right after a grouped product, which
  // no later launch fuses into.
  void submitEarly();
  // A step's read-back has run everything: the ring starts over and the step's parts are cut
  // where this step's were, so the next step's queue can match this one's graphs.
  void stepEnded() {
    ring_.restart();
    nextPartCommands_ = earlySubmitCommands_;
  }

  // Tokens of the op being queued: each op that knows them sets them first (swiglu, geglu and add
  // keep the op before's). They choose programmatic launch, early submits and skips.
  void setOpTokens(int64_t tokens) { opTokens_ = tokens; }
  int64_t opTokens() const { return opTokens_; }
  // Whether launches carry their shapes in their names (profiles, JITLLM_CUDA_SKIP).
  bool named() const { return profiler_.ops() || !skipOps_.empty(); }
  bool profiling() const { return profiler_.ops(); }

  FusionState& fusion() { return fusion_; }
  // Puts `replacement` in place of the queued command at `index` if that is still the last one
  // queued and still `expected` (another thread's flush may have taken the queue); false if not.
  bool replaceIfLastQueued(size_t index, const Command& expected, const Command& replacement);
  // Records the command at `index` as fusable (when the integer products and fusion are on).
  void offerFusion(size_t index, const Command& c, const float* out, int64_t elements,
                   std::function<std::optional<Command>(CUdeviceptr, uint64_t, int)> fused);

  uint64_t graphLaunches() const { return graphLaunches_.load(); }
  uint64_t graphsCaptured() const { return graphsCaptured_.load(); }
  uint64_t earlySubmits() const { return earlySubmits_.load(); }

 private:
  struct Graph {
    std::vector<Command> commands;
    CUgraphExec exec = nullptr;
    uint64_t lastUsed = 0;
    bool programmatic = false;
  };
  static constexpr size_t kMaxGraphs = 48;        // per device, least recently used dropped
  static constexpr size_t kMinGraphCommands = 8;  // shorter queues go straight to the stream
  // Queues submitted call by call lately, oldest first: one seen again is captured as a graph.
  static constexpr size_t kMaxRecentQueues = 16;
  // A decode step's first part is submitted at this many launches (submitEarly);
  // JITLLM_CUDA_EARLY_SUBMIT=N sets it, 0 submits a step whole.
  // Then each part is at least kEarlySubmitGrowth times the one before (JITLLM_CUDA_EARLY_GROWTH;
  // 1: parts of 32 throughout. Growing x3 - parts of 32, 96, then the rest - measured +0.6-3.5 %
  // tg128 on the 1B and 3B shapes against that, in five A/Bs over three calls, docs/cuda.md).
  static constexpr size_t kEarlySubmitCommands = 32, kEarlySubmitGrowth = 3;

  bool programmaticFor(int64_t tokens) const { return programmaticLaunch_ && tokens <= kProgrammaticMaxTokens; }
  // programmatic: launch the kernels with programmatic dependent launch.
  void submit(const std::vector<Command>& commands, bool programmatic);
  void launchGraph(const Graph& g);
  // Captures commands as a graph, keeps it (dropping the least recently used past kMaxGraphs)
  // and launches it. Under pendingMutex_.
  void captureGraph(std::vector<Command> commands, bool programmatic);
  void coalesceStagedCopies(std::vector<Command>& commands) const;

  const CudaContext& ctx_;
  CudaProfiler& profiler_;
  StagingRing ring_;
  FusionState fusion_;
  bool offersFusion_ = true;         // the integer products and fusion are on
  bool programmaticLaunch_ = false;  // CudaSettings::programmaticLaunch, where the GPU and driver allow
  bool graphsEnabled_ = true;        // JITLLM_CUDA_GRAPHS=0 turns them off
  // Diagnostics only (JITLLM_CUDA_SKIP): decode launches whose name starts with one of these are
  // not queued - wrong results, but a step's time without them is what they cost inside a graph.
  std::vector<std::string> skipOps_;
  size_t earlySubmitCommands_ = kEarlySubmitCommands, earlySubmitGrowth_ = kEarlySubmitGrowth;
  size_t nextPartCommands_ = kEarlySubmitCommands;  // this step's next part (executor thread)
  int64_t opTokens_ = 0;                            // executor thread

  std::mutex pendingMutex_;  // the queue and the graphs
  std::vector<Command> pending_;
  int64_t queueTokens_ = 0;  // the most tokens of any op in the queue: whether it takes programmatic launch
  std::vector<std::vector<Command>> recentlySubmitted_;
  std::vector<Graph> graphs_;
  uint64_t flushes_ = 0;
  std::atomic<uint64_t> graphLaunches_{0}, graphsCaptured_{0}, earlySubmits_{0};
};

}  // namespace jitllm::cuda
