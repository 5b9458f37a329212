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
// The device is a façade over parts with one job each: the context and stream (cuda_context.h),
// memory and host copies (cuda_memory.h), the kernels loaded (cuda_kernel_set.h), the op queue
// with its graphs and fusion bookkeeping (cuda_op_queue.h), the profiler (cuda_profiler.h), the
// products (cuda_matmul.h) and their prompt path (cuda_prompt_path.h), attention
// (cuda_attention.h) and block transfers (cuda_block_transfers.h); the one-launch ops are its own.
//
// Ownership: owns its parts; buffers it hands out must be destroyed before it. Thread-safety: ops,
// copies and allocation from one thread at a time (the device's executor; the context is made current on
// entry, so that thread may change); info() and memoryUsed() from any thread; buffers may be
// destroyed from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_attention.h"
#include "kernels/cuda/cuda_block_transfers.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel_set.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_op_queue.h"
#include "kernels/cuda/cuda_profiler.h"
#include "kernels/cuda/cuda_prompt_path.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/driver_api.h"
#include "kernels/device.h"

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
  int computeCapability() const { return ctx_.arch; }  // 90 for sm_90
  const std::string& cacheDirectory() const { return kernels_.cacheDirectory(); }
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
  // type, row length and GPU allow (CudaPromptPath).
  void setPromptRows(std::span<const RowRange> ranges, int64_t tokens) override;
  // Every module the workload's ops choose at 1..maxTokens tokens, by the choices the ops make
  // (CudaMatmul, CudaPromptPath, CudaAttention wantModules), compiled on one thread per core - or
  // read from the disk cache - then loaded.
  size_t prepareKernels(const KernelWorkload& workload) override;
  // One launch (rope_store).
  void ropeAndStore(float* q, float* k, const float* v, int64_t tokens, int heads, int kvHeads,
                    const int32_t* positions, const RopeParams& params, const KvSlot* slots,
                    const KvLayout& layout) override;

 private:
  // Device's budget (protected there), lent to CudaMemory.
  class Budget final : public MemoryBudget {
   public:
    explicit Budget(CudaDevice& device) : device_(device) {}
    void reserve(size_t bytes) override { device_.reserveMemory(bytes); }
    void release(size_t bytes) noexcept override { device_.releaseMemory(bytes); }
    void charge(size_t bytes) noexcept override { device_.chargeMemory(bytes); }

   private:
    CudaDevice& device_;
  };

  // The settings resolved and checked by create().
  CudaDevice(const DriverApi& api, const CudaDeviceOptions& options, const ResolvedCudaSettings& settings);
  // swiglu and geglu (kernel f, named op), their buffers checked and the context current: one
  // launch over n elements, offered for fusion with the quantization of its output (the down
  // projection's input).
  void gatedActivation(const char* op, CUfunction f, const float* gate, const float* up, float* out, int64_t n);
  void checkRope(const RopeParams& params, int headDim, int64_t tokens) const;
  // Checks kvStore's shape and buffers; returns the width of a token's K (and V).
  int64_t checkKvStore(const float* k, const float* v, int64_t tokens, const KvLayout& layout) const;
  // What kv_store reads, staged: each token's page address, then its slot (checked).
  void writeKvSlots(uint8_t* at, const KvSlot* slots, int64_t tokens, const KvLayout& layout) const;

  static constexpr unsigned kSelectThreads = 256;    // sampling.cuh's kSelectThreads
  static constexpr int kMaxSelectCandidates = 1024;  // sampling.cuh's kMaxSelect
  static constexpr unsigned kNormThreads = 1024;     // elementwise.cuh's rms_norm block

  // The parts, in the order they are made (each borrows those before it) and given back in reverse.
  CudaContext ctx_;
  Budget budget_{*this};
  CudaProfiler profiler_;
  CudaKernelSet kernels_;
  CudaOpQueue queue_;
  CudaMemory memory_;
  CudaPromptPath prompt_;
  CudaMatmul matmul_;
  CudaAttention attention_;
  CudaBlockTransfers blocks_;
  bool fuse_ = true;                     // CudaSettings::fuse
  uint64_t fusedAdds_ = 0;               // residual adds done by the rmsNorm after them
  ScratchBuffer candidates_;             // selectCandidates' output: ids, then values
  std::vector<uint8_t> candidatesHost_;  // a read-back's ids and values, split into the caller's
};

}  // namespace jitllm::cuda
