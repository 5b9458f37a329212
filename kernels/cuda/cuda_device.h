// An NVIDIA GPU as a Device, on the CUDA driver API (opened at run time, driver_api.h).
//
// Owns: a retained primary context, one non-blocking stream on which every op and copy runs in
// call order, device memory under a byte budget (cuMemAlloc; allocate throws OVERLOADED past the
// budget or when the GPU itself is out), pinned host staging (a ring for the small host-side
// descriptions each op brings - token ids, positions, page tables - and double buffers for large
// uploads), and the kernels it compiled: NVRTC builds each variant for this GPU's exact
// architecture on first use, specialised for the shapes and weight types it is asked to run
// (kernel_library.h), with an on-disk cache.
//
// Determinism: every kernel reduces in a fixed order without atomics, so the same inputs give
// bitwise-identical outputs on GPUs of the same architecture, and a token's result does not depend
// on how many tokens share its matrix product (prefill and decode agree exactly).
//
// Ownership: buffers it hands out must be destroyed before it. Thread-safety: ops, copies and
// allocation from one thread at a time (the device's executor; the context is made current on
// entry, so that thread may change); info() and memoryUsed() from any thread; buffers may be
// destroyed from any thread.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/driver_api.h"
#include "kernels/cuda/kernel_library.h"
#include "kernels/device.h"
#include "kernels/prompt_rows.h"
#include "kernels/quantized_input.h"

namespace jitllm::cuda {

struct CudaDeviceOptions {
  int index = 0;
  size_t memoryBudget = 0;               // 0: the GPU's free memory at start, less a reserve
  std::optional<std::string> cacheRoot;  // unset: KernelCache::defaultRoot(); "": no disk cache
  CudaSettings settings;                 // the knobs (cuda_settings.h); unset ones from the environment
};

// What a CudaDevice has done, for tests and tools. Counters since the device was made.
struct CudaStats {
  uint64_t graphLaunches = 0;  // op queues that ran as a captured graph
  uint64_t graphsCaptured = 0;
  uint64_t earlySubmits = 0;           // parts of decode queues submitted before the step's end
  uint64_t separateQuantizations = 0;  // activations quantized for integer products by quantize_x
  uint64_t fusedQuantizations = 0;     // ... by the op that produced them
  uint64_t fusedAdds = 0;              // residual adds done by the rmsNorm after them
  uint64_t groupedProducts = 0;        // matmuls() calls that ran as one launch
  uint64_t tensorCoreProducts = 0;     // products on the tensor-core prefill kernels
  uint64_t promptProducts = 0;         // products of prompt rows on fp16 tensor cores (gemm_f16)
  uint64_t perHeadAttentions = 0;      // attention launches with a block per query head (decode)
  uint64_t rowAttentions = 0;          // attention launches with blocks of several tokens (prefill)
  uint64_t peerBlockMoves = 0;         // moveBlocksTo calls that moved blocks GPU to GPU
  uint64_t modulesPrepared = 0;        // kernel modules prepareKernels made (compiled or from disk)
  uint64_t modulesCompiled = 0;        // modules NVRTC compiled (the rest came from the disk cache)
  uint64_t modulesMadeOnUse = 0;       // modules an op had to make after prepareKernels had run
  double prepareSeconds = 0;           // wall time in prepareKernels
};

class CudaDevice final : public Device {
 public:
  // GPUs the driver reports; 0 (and unavailableReason() says why) without a driver or a GPU.
  static int count();
  static std::string unavailableReason();
  // Throws Error(UNIMPLEMENTED) naming the reason when there is no such GPU.
  static std::unique_ptr<CudaDevice> create(const CudaDeviceOptions& options = {});
  ~CudaDevice() override;

  bool responsive() override;
  std::unique_ptr<HostBuffer> allocateStreamSource(size_t bytes) override;
  uint64_t markOps() override;
  uint64_t uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t afterMark) override;
  void waitForUpload(uint64_t upload) override;
  int computeCapability() const { return arch_; }  // 90 for sm_90
  const std::string& cacheDirectory() const { return cache_.directory(); }
  // Waits for everything queued so far.
  void synchronize();
  // What it has done so far (tests, tools). Executor thread.
  CudaStats stats() const;

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override;
  std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) override;
  void copyFromHost(uint8_t* dst, const void* src, size_t bytes) override;
  void copyToHost(void* dst, const uint8_t* src, size_t bytes) override;
  // A migration's KV pages: the blocks gathered on the GPU into one buffer (gather_blocks), moved in
  // 8 MiB chunks through the two pinned buffers with the host's copy of one chunk overlapping the
  // transfer of the next; scatter the other way round.
  void gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes) override;
  void scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes) override;
  // To another CudaDevice (another GPU, or this GPU through another instance): gather_blocks here,
  // one cuMemcpyPeerAsync into the target's block buffer (over the peer link when the GPUs have
  // one, enabled on first use; the driver stages it otherwise), scatter_blocks there. Returns when
  // the copy has landed; the scatter is queued on the target. False for any other target, or with
  // the block kernels off.
  bool moveBlocksTo(Device& target, const uint8_t* const* from, uint8_t* const* to, size_t count,
                    size_t blockBytes) override;
  // Device to device between CUDA devices by one peer copy; else Device's (through the host).
  void copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes) override;
  // On the GPU (sampling.cuh: select_candidates, a block per row): only the candidates are copied
  // back, count ids and values per row, never the rows.
  void selectCandidates(float* logits, int64_t rows, int64_t vocab, std::span<const CandidateRequest> requests,
                        int32_t* ids, float* values, int64_t stride) override;

  void getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override;
  void rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) override;
  void matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) override;
  void rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
            const RopeParams& params) override;
  void kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) override;
  void attention(const float* q, float* out, const AttentionBatch& batch) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  // q, k and v (gate and up) of a decode step in one launch (matmul_int_group) when they are
  // integer products; else one launch each.
  void matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) override;
  // Prompt rows of the products that follow take gemm_f16 (fp16 tensor cores), where the weight
  // type, row length and GPU allow (promptProduct).
  void setPromptRows(std::span<const RowRange> ranges, int64_t tokens) override;
  // Every module the workload's ops choose at 1..maxTokens tokens, by the choices the ops make
  // (intProduct, groupedParts, attentionModules), compiled on one thread per core - or read from
  // the disk cache - then loaded.
  size_t prepareKernels(const KernelWorkload& workload) override;
  // One launch (rope_store).
  void ropeAndStore(float* q, float* k, const float* v, int64_t tokens, int heads, int kvHeads,
                    const int32_t* positions, const RopeParams& params, const KvSlot* slots,
                    const KvLayout& layout) override;

 private:
  friend class CudaBuffer;

  struct ElementwiseKernels {
    CUfunction rmsNorm = nullptr, rope = nullptr, swiglu = nullptr, geglu = nullptr, add = nullptr, scale = nullptr,
               kvStore = nullptr, ropeStore = nullptr;
  };
  // Host bytes staged for one op: written at `host`, readable by kernels at `device` once
  // commit() has queued the copy.
  struct Staged {
    uint8_t* host;
    CUdeviceptr device;
    size_t bytes;
  };

  // attentionSpan, attentionRowTokens and moduleDefines: the options' with the environment's,
  // checked by create().
  CudaDevice(const DriverApi& api, const CudaDeviceOptions& options, ResolvedCudaSettings settings);
  void check(CUresult r, const char* what) const;
  void makeCurrent() const;
  void release(CUdeviceptr ptr, size_t bytes);
  // Throws FAILED unless [p, p + bytes) lies inside one buffer of this device.
  void requireOwned(const void* p, size_t bytes, const char* what) const;

  Staged stage(size_t bytes);
  void commit(const Staged& s);
  // Host memory to device memory and back through the two pinned buffers, chunk by chunk; both run
  // the queue first. The download returns when dst holds every byte.
  void uploadThroughStaging(CUdeviceptr dst, const void* src, size_t bytes);
  void downloadThroughStaging(void* dst, CUdeviceptr src, size_t bytes);
  // A step's read-back: flush, wait, copy into dst through the pinned buffers; then, everything
  // having run, the staging ring and the early-submit parts start over so that the next step's
  // queue can match this one's graph. Every copy that ends a step goes through here.
  void readBack(void* dst, CUdeviceptr src, size_t bytes);
  // Checks that each block lies whole in this device's memory and grows blockBuffer_ to hold them
  // all; returns their total size.
  size_t prepareBlockBuffer(const uint8_t* const* blocks, size_t count, size_t blockBytes, const char* what);
  // Stages the blocks' addresses and queues f (gather_blocks or scatter_blocks) between them and
  // blockBuffer_, in 16-byte moves when every address and the size allow.
  void launchBlockCopy(const char* op, CUfunction f, const uint8_t* const* blocks, size_t count, size_t blockBytes);
  const std::pair<CUfunction, CUfunction>& blockKernels();  // gather_blocks, scatter_blocks
  // Runs this device's queue and waits for it: nothing queued still reads or writes its memory.
  void drain();
  // Lets this context reach `peer`'s memory directly when the GPUs allow it (once per peer).
  void enablePeerAccess(const CudaDevice& peer);
  // bytes from this device's src to peer's dst, after everything queued here; returns once they
  // have landed. The caller has drained the peer if its queue may use dst.
  void copyToPeer(CudaDevice& peer, CUdeviceptr dst, CUdeviceptr src, size_t bytes);
  // What rope kernels read, staged: the inverse frequencies (double, as the CPU computes them), then
  // the positions; ropeBytes rounds up to 8 so more can follow.
  static size_t ropeBytes(const RopeParams& params, int64_t tokens);
  static void writeRope(uint8_t* at, const RopeParams& params, const int32_t* positions, int64_t tokens);
  void checkRope(const RopeParams& params, int headDim, int64_t tokens) const;
  // What kv_store reads, staged: each token's page address, then its slot (checked).
  static size_t kvSlotBytes(int64_t tokens);
  void writeKvSlots(uint8_t* at, const KvSlot* slots, int64_t tokens, const KvLayout& layout) const;
  // Checks kvStore's shape and buffers; returns the width of a token's K (and V).
  int64_t checkKvStore(const float* k, const float* v, int64_t tokens, const KvLayout& layout) const;

  // Ops are not submitted one by one: each launch and each copy out of the ring is queued as a
  // Command, and the queue is submitted when the host needs a result or orders work against
  // another stream (flush()). A queue identical to the previous one - a decode step is the same
  // ~300 launches every token: same kernels, same buffers, the ring reset to the same offsets,
  // only the staged bytes differ - is captured once as a CUDA graph, and from then on each step is
  // one cuGraphLaunch instead of ~300 driver calls (which dominated decode: docs/cuda.md).
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
  struct Graph {
    std::vector<Command> commands;
    CUgraphExec exec = nullptr;
    uint64_t lastUsed = 0;
    bool programmatic = false;
  };
  static constexpr size_t kMaxGraphs = 48;        // per device, least recently used dropped
  static constexpr size_t kMinGraphCommands = 8;  // shorter queues go straight to the stream
  void launchGraph(const Graph& g);
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
  // Queues c; returns its index in the queue (kNotQueued when profiling submitted it at once).
  static constexpr size_t kNotQueued = ~size_t(0);
  size_t enqueue(const char* op, const Command& c);
  // Submits what is queued: as a cached graph when one matches, else call by call (capturing it
  // as a graph when it repeats the previous queue). Safe from any thread.
  void flush();
  // programmatic: launch the kernels with programmatic dependent launch.
  void submit(const std::vector<Command>& commands, bool programmatic);
  // Programmatic dependent launch pays in decode, where a step is ~200 short kernels; in prefill
  // (pp512: 5-7 % slower with it on the H200) it does not. Queues of at most this many tokens
  // per op use it.
  static constexpr int64_t kProgrammaticMaxTokens = 8;
  bool programmaticFor(int64_t tokens) const { return programmaticLaunch_ && tokens <= kProgrammaticMaxTokens; }
  void coalesceStagedCopies(std::vector<Command>& commands) const;
  // Forgets the graphs (memory they refer to is going away).
  void dropGraphs();
  // The module of spec (plus JITLLM_CUDA_DEFINES), compiled or from the caches.
  CUmodule module(const ModuleSpec& spec);
  // spec with the tuning defines, as module() keys it; the disk cache's key material for it.
  ModuleSpec tuned(const ModuleSpec& spec) const;
  std::string cacheMaterial(const ModuleSpec& tunedSpec) const;
  // A tuned spec's cubin: from the disk cache, else compiled by NVRTC (`compiled` set) and stored
  // there. Touches no device state: prepareKernels calls it from many threads at once.
  std::vector<char> moduleImage(const ModuleSpec& tunedSpec, bool& compiled) const;
  // Loads the image into this device's context as the module keyed `key`, counting a compile.
  CUmodule loadModule(std::string key, const std::vector<char>& image, bool compiled);
  // How an integer product of w (rows at `align`) over `tokens` runs: on the tensor cores (mma,
  // `tokens` then a block's tokens / 2, 16 rows) or on the dp4a kernels (tokens and rows per warp).
  struct IntProduct {
    bool mma = false;
    int tokens = 1;
    int rows = 1;
    int rowWarps = 4;  // mma: a block's row warps (tensorCoreRowWarps)
  };
  IntProduct intProduct(const WeightRef& w, int align, int64_t tokens) const;
  // The fewest tokens a q4_K/q6_K product takes to the tensor cores. Below it their tiles (64 rows
  // x 32 tokens a block) leave most SMs idle and the dp4a kernels are faster; at 32 the two are
  // even, at 64 the tensor cores win (docs/benchmarks.md, "Serving").
  static constexpr int64_t kTensorCoreMinTokens = 32;
  // Products of one input (QKV, gate/up) share a launch on the dp4a kernels up to this many tokens:
  // every decode-shaped step below the tensor cores' threshold.
  static constexpr int64_t kGroupMaxTokens = 16;
  // Tokens per warp of the float kernels and of the dp4a ones outside the tensor-core path.
  static int warpTokens(int64_t tokens) { return tokens == 1 ? 1 : tokens <= 8 ? 4 : 16; }
  // Whether matmuls() runs these products as one matmul_int_group launch at `tokens` (overlaps
  // apart, which it checks on the buffers), and the module's parts and q4_K alignment then.
  bool groupable(std::span<const WeightRef> ws, int64_t tokens) const;
  static int groupWarpTokens(int64_t tokens) { return warpTokens(tokens); }
  std::vector<IntMatmulPart> groupedParts(std::span<const WeightRef> ws, int64_t tokens, int& align) const;
  CUfunction function(CUmodule m, const char* name);
  CUfunction matmulKernel(quant::TensorType type, int64_t cols, int align, bool xvec, int variant);
  CUfunction intMatmulKernel(quant::TensorType type, int64_t cols, int align, int tokens, int rows, bool mma,
                             int rowWarps = 4);
  // Launches a matrix-product kernel over w's rows and `tokens`: blocks of 4 warps of rowsPerWarp
  // rows, a grid row per perWarpTokens tokens; the profile names the shape. `args`: the kernel's.
  template <typename... A>
  void launchMatmul(const char* kernel, CUfunction f, const WeightRef& w, int64_t tokens, int perWarpTokens,
                    int perWarpRows, int rowsPerWarp, const A&... args);
  // Whether launches carry their shapes in their names (profiles, JITLLM_CUDA_SKIP).
  bool named() const { return profile_ || !skipOps_.empty(); }
  // Checks a product's shape and buffers; returns the alignment of the weight rows.
  int checkMatmul(const WeightRef& w, const float* x, int64_t tokens, const float* y, const float* bias) const;
  // Whether gemm_f16 takes products by w: the prompt path on (sm_80 or later), a weight type
  // dequant_f16 decodes into fp16 without loss of range (quantized or f16), whole 32-element slices.
  bool promptMatrix(const WeightRef& w) const;
  // Whether prompt rows of a product of w over `tokens` rows at x take gemm_f16: the rows set by
  // setPromptRows for exactly this many tokens, promptMatrix(w), and a 16-byte aligned input.
  bool promptProduct(const WeightRef& w, const float* x, int64_t tokens) const;
  // matmul() with the prompt rows on gemm_f16 and every other run of rows on matmulRows.
  void matmulPromptSplit(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  // Rows of x on gemm_f16: w decoded into halfWeights_, x rounded into halfInput_, one product.
  void matmulPrompt(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  // matmul() on the decode kernels (integer or float) for these rows.
  void matmulRows(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  struct PromptKernels {
    CUfunction dequant = nullptr, toHalf = nullptr, gemm = nullptr;
  };
  // gemm_f16.cuh's kernels for a weight type, row length, alignment and block height (32, 64, 128),
  // at promptSlice(cols).
  const PromptKernels& promptKernels(quant::TensorType type, int64_t cols, int align, int blockRows);
  // The block height gemm_f16 takes for `rows` x `tokens`: the tallest whose blocks still number
  // the multiprocessors (the bits do not depend on it).
  int promptBlockRows(int64_t rows, int64_t tokens) const;
  // The integer path of matmul(): quantizes x into xq_ (unless it still holds x) and multiplies.
  void matmulInteger(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  // Makes xq_ hold x's integer form: nothing when it still does, else the producer that just queued
  // x writes it (fused), else quantize_x. Returns the row stride. The caller holds a KeepInput.
  uint64_t quantizeInput(const float* x, int64_t tokens, int64_t cols);
  // The integer kernels' rows per warp for w at perWarpTokens tokens per warp (dp4a kernels).
  int intRowsPerWarp(const WeightRef& w, int perWarpTokens) const;
  const ElementwiseKernels& elementwise();
  // swiglu and geglu (kernel f, named op), their buffers checked and the context current: one
  // launch over n elements, offered for fusion with the quantization of its output (the down
  // projection's input).
  void gatedActivation(const char* op, CUfunction f, const float* gate, const float* up, float* out, int64_t n);
  CUfunction attentionKernel(int headDim, int group, int pageTokens, bool f16);
  // attention_split of the same module (attention.cuh): a decode token's chunks over many blocks;
  // attention_spans when chunks fold in spans (attentionSpan_).
  CUfunction attentionSplitKernel(int headDim, int group, int pageTokens, bool f16);
  // attention_rows at `perBlock` tokens a block, allowed its dynamic shared memory; null when that
  // does not fit this GPU (sm_75's 64 KiB: the kernel holds two K/V tiles).
  CUfunction attentionRowsKernel(int headDim, int group, int pageTokens, bool f16, int perBlock);
  // Grows a scratch buffer of this device to `need` bytes (rounded up to 1 MiB) after the queued
  // work ran; false when it was large enough. Its old contents are gone.
  bool growScratch(CUdeviceptr& buffer, size_t& bytes, size_t need, const char* what);
  static constexpr int kAttentionChunk = 64;         // attention.cuh's kChunk
  static constexpr unsigned kSelectThreads = 256;    // sampling.cuh's kSelectThreads
  static constexpr int kMaxSelectCandidates = 1024;  // sampling.cuh's kMaxSelect
  static constexpr unsigned kNormThreads = 1024;     // elementwise.cuh's rms_norm block

  const DriverApi& api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  int arch_ = 0;
  int multiprocessors_ = 0;
  KernelCache cache_;

  mutable std::mutex allocationsMutex_;
  std::map<uintptr_t, size_t> allocations_;  // base address -> bytes

  // The ring for op descriptions: two halves, each released by an event once its copies ran.
  static constexpr size_t kRingBytes = size_t(4) << 20;
  uint8_t* ringHost_ = nullptr;
  CUdeviceptr ringDevice_ = 0;
  size_t ringBytes_ = 0;
  size_t ringOffset_ = 0;
  int ringHalf_ = 0;
  std::array<CUevent, 2> ringEvents_{};

  // Large uploads go through two pinned buffers in turn, so a copy overlaps the next memcpy.
  static constexpr size_t kStagingBytes = size_t(8) << 20;
  std::array<uint8_t*, 2> staging_{};
  std::array<CUevent, 2> stagingEvents_{};

  // Streaming weights: copies on their own stream, ordered against the ops by events. Tickets
  // count up; ticket t uses event (t - 1) % kStreamEvents, which is free again long before it comes
  // round (a model streams through two slots, so a handful are ever in flight).
  static constexpr size_t kStreamEvents = 64;
  CUstream copyStream_ = nullptr;
  std::array<CUevent, kStreamEvents> markEvents_{}, uploadEvents_{};
  uint64_t marks_ = 0, uploads_ = 0;

  std::unordered_map<std::string, CUmodule> modules_;
  std::unordered_map<uint64_t, CUfunction> matmuls_;
  std::unordered_map<uint64_t, CUfunction> attentions_;
  std::unordered_map<uint64_t, CUfunction> intMatmuls_;
  std::unordered_map<uint64_t, CUfunction> attentionSplits_;
  std::unordered_map<uint64_t, CUfunction> attentionRows_;
  // matmul_int_group by {cols, align, tokens per warp, then per part type * 64 + rows per warp}.
  using GroupKey = std::array<int64_t, 6>;
  std::map<GroupKey, CUfunction> groupMatmuls_;
  bool fuse_ = true;                 // CudaDeviceOptions::fuse
  bool programmaticLaunch_ = false;  // CudaDeviceOptions::programmaticLaunch, where the GPU and driver allow
  // Decode attention spreads a context over blocks (attention_split / _spans) once the longest
  // has more than this many positions; 0: never (one block per token and head). The same bits
  // either way. JITLLM_CUDA_ATTENTION_SPLIT=N (tuning; default one chunk, 64).
  int splitPast_ = kAttentionChunk;
  // CudaDeviceOptions::attentionRowTokens (or JITLLM_CUDA_ATTENTION_ROWS); 0: off; -1 (neither set):
  // defaultAttentionRowTokens by head dim.
  int attentionRowTokens_ = -1;
  int maxSharedOptIn_ = 0;  // dynamic shared memory a kernel may opt in to (bytes)
  // JITLLM_CUDA_ATTENTION_HEADS=0: a block serves all query heads of its KV head even when the
  // batch has few blocks (attention.cuh; the same bits either way).
  bool attentionPerHead_ = true;
  int attentionSpan_ = 0;     // CudaDeviceOptions::attentionSpan, JITLLM_CUDA_ATTENTION_SPAN, or the default
  bool blockKernels_ = true;  // CudaDeviceOptions::blockKernels
  std::pair<CUfunction, CUfunction> blockCopies_{};
  CUdeviceptr blockBuffer_ = 0;  // gathered blocks on their way to or from the host or a peer
  std::vector<CUdevice> peers_;  // devices whose memory this context may reach (enablePeerAccess)
  uint64_t peerBlockMoves_ = 0;
  uint64_t modulesPrepared_ = 0, modulesCompiled_ = 0, modulesMadeOnUse_ = 0;
  double prepareSeconds_ = 0;
  bool prepared_ = false;  // prepareKernels has run: a module made on use after it is counted
  size_t blockBufferBytes_ = 0;
  CUdeviceptr partials_ = 0;  // per-chunk attention states (attention_split)
  size_t partialsBytes_ = 0;
  CUdeviceptr chunkCounters_ = 0;  // attention_split's finished chunks per (token, KV head); zero between launches
  size_t chunkCountersBytes_ = 0;
  CUfunction quantize_ = nullptr;

  // Activations quantized for the integer products (quantize_x.cuh), grown on demand. `quantized_`
  // names the input xq_ holds while nothing else has been queued since it was quantized - q, k and
  // v (gate and up) read one x and quantize it once; any other op or copy may write that x and
  // forgets it. Executor thread only.
  bool integerMatmul_ = true;
  bool tensorCores_ = true;
  int tensorCoreTokens_ = kDefaultTensorCoreTokens;  // CudaDeviceOptions::tensorCoreTokens
  bool tensorCoreTokensChosen_ = false;              // ... set, so used for every product
  std::optional<int> tensorCoreRowWarps_;            // CudaSettings::tensorCoreRowWarps
  CUdeviceptr xq_ = 0;
  size_t xqBytes_ = 0;
  // The prompt path (setPromptRows): the rows it covers, the decoded fp16 weights of the product
  // being computed and the fp16 activations, grown on demand.
  bool promptGemm_ = true;
  PromptRows promptRows_;
  std::map<std::array<int64_t, 4>, PromptKernels> promptKernels_;
  CUdeviceptr halfWeights_ = 0, halfInput_ = 0;
  size_t halfWeightsBytes_ = 0, halfInputBytes_ = 0;
  int promptBlockRowsChosen_ = 0;  // CudaSettings::promptBlockRows; 0: promptBlockRows' choice
  int promptSliceK_ = 64;          // CudaSettings::promptSliceK
  // The slice gemm_f16 takes for rows of `cols` elements: promptSliceK_ where it divides them.
  int promptSlice(int64_t cols) const { return cols % promptSliceK_ == 0 ? promptSliceK_ : 32; }
  // The input halfInput_ holds in fp16 while nothing but prompt products has been queued since
  // (q, k and v round one x once); keepHalf_ is set while a prompt product queues its launches.
  QuantizedInput halfHeld_;
  bool keepHalf_ = false;
  // selectCandidates' output (ids, then values) and its kernel.
  CUdeviceptr candidates_ = 0;
  std::vector<uint8_t> candidatesHost_;  // a read-back's ids and values, split into the caller's
  size_t candidatesBytes_ = 0;
  CUfunction selectKernel_ = nullptr;
  QuantizedInput quantized_;
  bool keepQuantized_ = false;  // set while an integer product queues its own launches
  // Sets a keep flag for its lifetime: keepQuantized_ over an integer product's quantization and
  // launch, keepHalf_ over a prompt product's launches.
  struct KeepInput {
    explicit KeepInput(bool& held) : flag(held) { flag = true; }
    ~KeepInput() { flag = false; }
    KeepInput(const KeepInput&) = delete;
    KeepInput& operator=(const KeepInput&) = delete;
    bool& flag;
  };
  // Forgets the inputs held in another form (quantized_, halfHeld_): their bytes may change.
  void forgetHeldInputs() {
    quantized_ = {};
    halfHeld_ = {};
  }
  // The last op queued, when it produced a float array a product may read next and can write that
  // array's integer form as it goes (rms_norm, swiglu and geglu with an xq argument): an integer product
  // reading exactly that array swaps the queued command for its fused form instead of launching
  // quantize_x. `fused` returns the fused command for activations of `k` columns at xq (rows of
  // `stride` bytes), or nothing when the op cannot produce that shape.
  struct FusableProducer {
    size_t index = kNotQueued;
    Command command;
    const float* out = nullptr;
    int64_t elements = 0;
    std::function<std::optional<Command>(CUdeviceptr xq, uint64_t stride, int k)> fused;
  };
  FusableProducer producer_;
  uint64_t separateQuantizations_ = 0, fusedQuantizations_ = 0, fusedAdds_ = 0, groupedProducts_ = 0,
           tensorCoreProducts_ = 0, promptProducts_ = 0, perHeadAttentions_ = 0, rowAttentions_ = 0;
  // The last op queued when it was add(x, y): an rmsNorm of x right after replaces it with one
  // kernel that adds and normalises (rms_norm's addend).
  struct QueuedAdd {
    size_t index = kNotQueued;
    Command command;
    const float* x = nullptr;
    const float* y = nullptr;
    int64_t elements = 0;
  };
  QueuedAdd lastAdd_;
  // Puts `replacement` in place of the queued command at `index` if that is still the last one
  // queued and still `expected` (another thread's flush may have taken the queue); false if not.
  bool replaceIfLastQueued(size_t index, const Command& expected, const Command& replacement);
  // Records the command at `index` as fusable (when the integer kernels are on).
  void offerFusion(size_t index, const Command& c, const float* out, int64_t elements,
                   std::function<std::optional<Command>(CUdeviceptr, uint64_t, int)> fused);
  int intDecodeRows_ = 0, intPrefillRows_ = 0;  // 0: the built-in choice
  // attention_spans takes a whole span a block where that still makes this many blocks (fewer
  // leave multiprocessors idle; CudaDeviceOptions::attentionSpanBlocks). The bits do not depend on it.
  int spanBlocks_ = 0;
  // Diagnostics only (JITLLM_CUDA_SKIP): decode launches whose name starts with one of these are
  // not queued - wrong results, but a step's time without them is what they cost inside a graph.
  std::vector<std::string> skipOps_;
  // Added to every kernel module: CudaDeviceOptions::defines, then JITLLM_CUDA_DEFINES (variants
  // such as JL_ATTN_PREFETCH=0, tuning runs such as JL_UNROLL=4).
  std::vector<std::pair<std::string, int64_t>> tuningDefines_;
  std::optional<ElementwiseKernels> elementwise_;

  // JITLLM_CUDA_PROFILE=1: each launch is submitted at once between two timing events, and its
  // GPU time is added to its op's line, printed to stderr when the device goes away. No graphs
  // then; for finding where a step's time goes, never for measuring throughput.
  struct OpTime {
    int64_t calls = 0;
    double seconds = 0;
  };
  bool profile_ = false;
  std::map<std::string, OpTime> profileTimes_;
  struct Profiled {
    std::string op;
    CUevent start, end;
  };
  std::vector<Profiled> profiled_;  // launched, not yet read back
  std::vector<CUevent> eventPool_;
  void collectProfile();
  // Queues run() between two events whose elapsed time collectProfile adds to op's.
  void timed(std::string op, const std::function<void()>& run);
  // JITLLM_CUDA_GRAPH_TIMES: each graph launch timed so (the GPU's time for a whole step, to set
  // against the wall-clock time of a token: the difference is the host's part).
  bool timeGraphs_ = false;
  struct HostTimes {  // lastRead, build and builds under pendingMutex_; the rest: executor thread
    double flush = 0, waitGpu = 0, copy = 0, build = 0;  // seconds
    int64_t reads = 0, builds = 0;
    std::optional<std::chrono::steady_clock::time_point> lastRead;
  } hostTimes_;
  // A decode step's first part is submitted at this many launches (submitEarly);
  // JITLLM_CUDA_EARLY_SUBMIT=N sets it, 0 submits a step whole.
  // Then each part is at least kEarlySubmitGrowth times the one before (JITLLM_CUDA_EARLY_GROWTH;
  // 1: parts of 32 throughout. Growing x3 - parts of 32, 96, then the rest - measured +0.6-3.5 %
  // tg128 on the 1B and 3B shapes against that, in five A/Bs over three calls, docs/cuda.md).
  static constexpr size_t kEarlySubmitCommands = 32, kEarlySubmitGrowth = 3;
  size_t earlySubmitCommands_ = kEarlySubmitCommands, earlySubmitGrowth_ = kEarlySubmitGrowth;
  size_t nextPartCommands_ = kEarlySubmitCommands;  // this step's next part (executor thread)
  void submitEarly();

  // Tokens of the op being queued (executor thread; each op that knows them sets it first - swiglu,
  // geglu and add keep the op before's), and the most of any op in the queue (under pendingMutex_):
  // which queues take programmatic launch.
  int64_t opTokens_ = 0;
  int64_t queueTokens_ = 0;
  std::mutex pendingMutex_;  // the queue and the graphs (release() may flush from another thread)
  std::vector<Command> pending_;
  // Queues submitted call by call lately, oldest first: one seen again is captured as a graph.
  static constexpr size_t kMaxRecentQueues = 16;
  std::vector<std::vector<Command>> recentlySubmitted_;
  std::vector<Graph> graphs_;
  uint64_t flushes_ = 0;
  bool graphsEnabled_ = true;  // JITLLM_CUDA_GRAPHS=0 turns them off
  std::atomic<uint64_t> graphLaunches_{0}, graphsCaptured_{0}, earlySubmits_{0};
};

}  // namespace jitllm::cuda
