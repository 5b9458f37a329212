// The CPU as a Device: host memory under a byte budget, a thread pool, and SIMD kernels chosen
// for the CPU found (kernels/cpu/gemm picks AVX-512, AVX2 or portable code at run time).
//
// Several CpuDevices can exist in one process (cpu:0, cpu:1, ...), each with its own budget and
// threads, so that placing layers on different devices and moving them is testable on a machine
// with no GPU.
//
// Ownership: owns its thread pool; buffers it hands out must be destroyed before it.
// Thread-safety: ops and allocation from one thread at a time (the device's executor);
// info() and memoryUsed() from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/cpu_tuning.h"
#include "kernels/cpu/gemm/isa.h"
#include "kernels/cpu/gemm/matmul.h"
#include "kernels/cpu/packed_copies.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/device.h"
#include "kernels/prompt_rows.h"

namespace jitllm::cpu {

struct CpuDeviceOptions {
  int index = 0;
  int threads = 0;          // 0: the tuning's (every physical core until measured)
  size_t memoryBudget = 0;  // 0: the machine's physical memory
  std::optional<Isa> isa;   // force a kernel variant (tests); default: the best the CPU has
  // Measured settings (cpu_tuning.h); default: thisCpusTuning() (cpu_tuner.h): this CPU's file in
  // the cache, measured and kept first on a machine that has none (unless JITLLM_CPU_TUNE=0).
  std::optional<CpuTuning> tuning;
  // Whether prompt rows (setPromptRows) take the byte activations of matmulPromptRows where the
  // Isa has them; default: yes unless JITLLM_CPU_PROMPT_BYTES=0 (which keeps decode's bits for
  // every token, at prefill's old speed).
  std::optional<bool> promptBytes;
  // Whether decode reads packed copies of the matrices that have one (gemm/packed_rows.h: q4_K, q5_K
  // and q6_K rows interleaved by 8, made by prepareKernels or at a matrix's first product, charged to
  // the budget; the same results, faster decode where it is not waiting for memory); default: yes
  // unless JITLLM_CPU_PACK=0.
  std::optional<bool> packedDecode;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {});
  ~CpuDevice() override;

  Isa isa() const { return isa_; }
  const CpuTuning& tuning() const { return tuning_; }
  ThreadPool& pool() { return pool_; }

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override;
  std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) override;
  void copyFromHost(uint8_t* dst, const void* src, size_t bytes) override;
  void copyToHost(void* dst, const uint8_t* src, size_t bytes) override;
  // CPU memory is host memory: one copy straight into the target.
  void copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes) override;
  void quiesce() override { pool_.park(); }
  // The kernels are compiled in; what a workload's products need ready is decode's packed copies
  // of their matrices (packedDecode), made here - at a model's load - rather than in its first
  // reply. Returns 0 (no kernel made).
  size_t prepareKernels(const KernelWorkload& workload) override;

  void getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override;
  void rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) override;
  // Rows given by setPromptRows take matmulPromptRows where the Isa has it for w's type.
  void matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) override;
  // One parallel loop over all the targets' rows, and a prompt's activations laid out once for
  // all of them (q, k and v share their input): each row computed as matmul() computes it.
  void matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) override;
  void rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
            const RopeParams& params) override;
  void kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) override;
  void attention(const float* q, float* out, const AttentionBatch& batch) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  void softcap(float* x, float cap, int64_t n) override;
  // The rows are host memory: selected in place, rows spread over the threads.
  void selectCandidates(float* logits, int64_t rows, int64_t vocab, std::span<const CandidateRequest> requests,
                        int32_t* ids, float* values, int64_t stride) override;
  void setPromptRows(std::span<const RowRange> ranges, int64_t tokens) override;
  bool promptBytes() const { return promptBytes_; }
  // Bytes of decode's packed copies held now (part of memoryUsed()).
  size_t packedBytes() const { return packed_.bytes(); }

 private:
  friend class CpuBuffer;
  void release(size_t bytes) { releaseMemory(bytes); }

  // Whether w's rows stream from memory: the distinct weight matrices this device has multiplied
  // with add up to more than the caches hold. A model's first step counts as it goes.
  bool streamsFromMemory(const WeightRef& w);
  // The products of x with every target's matrix, on the ordinary integer and float kernels and
  // the prompt path (not AMX's prepared activations: matmul() runs those one by one).
  void multiply(std::span<const MatmulTarget> targets, const float* x, int64_t tokens);
  WeightView viewFor(const WeightRef& w, int64_t tokens);
  // w's packed copy for decode (made now if need be), or null where it has none.
  const uint8_t* packedCopy(const WeightView& w);

  Isa isa_;
  CpuTuning tuning_;
  ThreadPool pool_;
  std::unordered_map<const void*, size_t> weightBytes_;  // executor thread only
  PreparedActivations prepared_;                         // executor thread only; reused by each matmul
  // Executor thread only: one per run of prompt rows in a product, reused by each matmul.
  std::vector<std::unique_ptr<PromptActivations>> promptActivations_;
  size_t weightBytesTotal_ = 0;
  bool promptBytes_;
  bool packedDecode_;
  PackedCopies packed_;    // decode's packed copies of adopted matrices; any thread
  PromptRows promptRows_;  // executor thread only: the last setPromptRows
  // The cos and sin of the last two rope parameter sets (executor thread only): every layer of a
  // step rotates q and k at the same positions with the same parameters (two sets where local and
  // global layers have their own bases, as gemma3's), so they are computed once per step, not
  // twice per layer (in double, sin and cos cost more than the rotation itself).
  struct RopeAngles {
    int rotaryDims = 0;
    float freqBase = 0, freqScale = 0, attnFactor = 0;
    std::vector<float> factors;      // freqFactors' values (empty: none)
    std::vector<int32_t> positions;  // per token
    std::vector<float> cos, sin;     // tokens x rotaryDims / 2
  };
  RopeAngles ropeAngles_[2];  // [0] the most recently used
};

}  // namespace jitllm::cpu
