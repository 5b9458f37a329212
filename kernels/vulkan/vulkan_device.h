// A Vulkan physical device as a jitllm Device: Vulkan 1.2 compute through the loader, kernels
// compiled at run time for the model and the device (pipeline_library.h), memory from a
// sub-allocating pool under an explicit budget, work queued in order on one compute queue.
//
// Pointers: the Device interface's "addresses in the device's space" are real GPU virtual
// addresses (VK_KHR_buffer_device_address, core in 1.2): DeviceBuffer::data() is the buffer's
// device address, the runtime offsets it like any pointer, kernels receive it in push constants,
// and copies map it back to (VkBuffer, offset) through the pool. It is never dereferenced on the
// host. Every op checks that the addresses it is given lie in this device's memory, so a wrong
// pointer is an Error(FAILED), not a GPU fault.
//
// Ordering: ops are recorded and submitted asynchronously but execute in call order with a
// barrier between each; copyToHost waits for everything before it. Freeing a buffer also waits
// (work still queued may read it).
//
// Determinism: every reduction runs in an order fixed by the kernel's source and its numeric
// constants, which the host chooses from the shapes alone (never from timing), so one device
// gives bitwise-identical results run after run, and a token's result does not depend on the
// batch it runs in (see shaders/matmul.comp).
//
// The device is the Device interface over parts with one job each: the logical device
// (device_context.h), memory (memory_pool.h), the ordered stream of work with its upload arena
// (command_stream.h), the kernels (pipeline_library.h, kernel_variants.h), the products' dispatch
// shapes (matmul_shapes.h) and the profile (stream_profile.h).
//
// Ownership: owns the VkDevice and everything made from it; shares the VulkanInstance with its
// siblings. Buffers it hands out must be destroyed before it.
// Thread-safety: as Device: one executor thread at a time; info() and memoryUsed() from any.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/quantized_input.h"
#include "kernels/vulkan/command_stream.h"
#include "kernels/vulkan/device_context.h"
#include "kernels/vulkan/matmul_shapes.h"
#include "kernels/vulkan/memory_pool.h"
#include "kernels/vulkan/physical_devices.h"
#include "kernels/vulkan/pipeline_library.h"
#include "kernels/vulkan/rope_table.h"
#include "kernels/vulkan/vulkan_settings.h"

namespace jitllm::vulkan {

struct VulkanDeviceOptions {
  int index = 0;                         // N of "vulkan:N": the N-th usable device, GPUs before software ones
  size_t memoryBudget = 0;               // 0: the device-local heap's budget (VK_EXT_memory_budget) or size, less 1/16
  std::optional<std::string> cacheRoot;  // unset: KernelCache::defaultRoot(); "": no disk cache
  std::shared_ptr<VulkanInstance> instance;  // devices made together share one; null: a new one
  int idIndex = -1;         // N of its id "vulkan:N" where that is not `index` (a device found after start); -1: index
  VulkanSettings settings;  // the knobs (vulkan_settings.h); unset ones from the environment
};

// What a VulkanDevice has done, for tests and tools. Counters since the device was made.
struct VulkanStats {
  // Inputs of integer products quantized by a quantize_x dispatch of their own, and by the op
  // that produced them (rmsNorm, attention).
  uint64_t separateQuantizations = 0;
  uint64_t fusedQuantizations = 0;
  uint64_t matmulTunings = 0;  // product shapes this device timed (not found in its tuning file)
  double prepareSeconds = 0;   // in prepareKernels
};

class VulkanDevice final : public Device {
 public:
  // Throws Error(UNIMPLEMENTED) without a loader, Error(FAILED) when there is no usable device
  // with that index (the message lists what exists and why each is unusable).
  static std::unique_ptr<VulkanDevice> create(const VulkanDeviceOptions& options = {});
  ~VulkanDevice() override;

  bool responsive() override;
  std::optional<MemoryReading> driverMemory() const override;

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override;
  std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) override;
  void copyFromHost(uint8_t* dst, const void* src, size_t bytes) override;
  void copyToHost(void* dst, const uint8_t* src, size_t bytes) override;

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
  // Makes every pipeline the workload's steps can ask for (products at 1, 2, 4 and 8 tokens a
  // workgroup, timed by the tuner where that is on; attention with and without the split; norms,
  // rope, KV stores, gathers, activations), their SPIR-V compiled on a thread per core; a step
  // after it makes none (KernelStats::madeOnUse counts those it did not foresee).
  size_t prepareKernels(const KernelWorkload& workload) override;
  // On the device (select_candidates.comp): only the candidates come back, not the rows.
  void selectCandidates(float* logits, int64_t rows, int64_t vocab, std::span<const CandidateRequest> requests,
                        int32_t* ids, float* values, int64_t stride) override;

  // Waits until every queued op has run.
  void synchronize();
  const PhysicalDeviceDescription& physical() const { return *ctx_.physical; }
  // Whether the integer products use the device's dot product instructions.
  bool usesIntegerDotProduct() const { return usesDot4_; }
  const KernelStats& kernelStats() const { return pipelines_->stats(); }
  const std::string& cacheDirectory() const { return pipelines_->cache().directory(); }
  PipelineLibrary& pipelines() { return *pipelines_; }
  // What it has done so far (tests, tools). Executor thread.
  VulkanStats stats() const {
    return {separateQuantizations_, fusedQuantizations_, shapes_->tunings(), prepareSeconds_};
  }

 private:
  friend class VulkanBuffer;
  // A product shape prepareKernels found untimed: timed once its pipelines are made.
  struct Untimed {
    WeightRef w;
    int tt;
  };

  VulkanDevice() = default;
  // The parts on the logical device made for ctx_ (create's second half).
  void makeParts(const VulkanDeviceOptions& options, const VulkanSettings& settings, bool dot4);
  void release(const Allocation& allocation);
  uint64_t address(const void* p, uint64_t bytes, const char* what) const;
  template <typename Push>
  void dispatch(VkPipeline pipeline, const Push& push, uint32_t x, uint32_t y = 1, uint32_t z = 1);
  void stageToDevice(const LocatedRange& dst, const uint8_t* src, size_t bytes);
  // swiglu and geglu: `shader` (swiglu.comp, geglu.comp) over n elements at checked addresses.
  void gatedActivation(const char* shader, uint64_t gate, uint64_t up, uint64_t out, int64_t n);
  // Grows a scratch buffer of this device to at least `need` bytes (at least doubling it) after
  // the queued work that may read it ran; false when it was large enough. Contents are lost.
  bool growScratch(std::unique_ptr<DeviceBuffer>& buffer, uint64_t need);
  // A producer (rmsNorm, attention) writing the integer form of its rows x cols output itself:
  // where to (xq_, grown to fit), or false when no integer product could read it. After the
  // producer's dispatch, noteFusedQuantization names that output as what xq_ holds.
  bool fusedQuantizationScratch(int64_t rows, int64_t cols, uint64_t& xq, uint32_t& xqStride);
  void noteFusedQuantization(const float* out, int64_t rows, int64_t cols);
  // The integer path of matmul(): quantizes x into xq_ (unless it still holds x) and multiplies.
  bool integerMatmulFits(const WeightRef& w) const;
  void matmulInteger(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias);
  // Whether a producer writes the integer form of rows of `cols` (fusedQuantizationScratch).
  bool quantizesRowsOf(int64_t cols) const;
  // Records `shader` (matmul.comp or matmul_int.comp) for w's type and row length over `tokens`,
  // in the dispatch shape MatmulShapes chose (timing the candidates first where none was chosen
  // yet and `repeatable`: dispatching it again gives the same output, i.e. it does not overwrite
  // what it reads).
  template <typename Push>
  void dispatchMatmul(const char* shader, const WeightRef& w, int64_t tokens, const Push& push, bool repeatable);
  // Attention's page tables: tokens of one session share theirs, so each distinct table goes up
  // once, as long as its longest user needs.
  struct AttentionPages {
    struct Table {
      uint32_t first = 0;            // its first page's index in the upload
      uint32_t pages = 0;            // pages its longest user needs
      uint32_t used = ~uint32_t(0);  // the first page any user reads
    };
    std::map<const uint8_t* const*, Table> tables;
    uint32_t totalPages = 0;
    int64_t maxPositions = 0;  // the most positions a token of the batch attends to
  };
  AttentionPages attentionPages(const AttentionBatch& batch) const;
  // Uploads each token's position and first page, then the pages; returns the upload.
  CommandStream::Upload uploadAttentionPages(const AttentionBatch& batch, const AttentionPages& pages);
  // prepareKernels' steps: the products' pipelines (every candidate shape of those not timed yet,
  // listed in `untimed`), then timing those on scratch operands.
  void wantProducts(const KernelWorkload& workload, std::vector<KernelSpec>& specs, std::vector<Untimed>& untimed);
  void timeProducts(const std::vector<Untimed>& untimed);

  DeviceContext ctx_;
  std::unique_ptr<MemoryPool> pool_;
  std::unique_ptr<CommandStream> stream_;
  std::unique_ptr<PipelineLibrary> pipelines_;
  std::unique_ptr<MatmulShapes> shapes_;
  RopeTable rope_;

  // Activations quantized for the integer products (shaders/quantize_x.comp), grown on demand.
  // `quantized_` names the input xq_ holds while nothing else has been recorded since - q, k and
  // v (gate and up) read one x and quantize it once; any other op or copy forgets it. rmsNorm
  // writes its output's integer form too (rms_norm.comp's QUANTIZE) and names it here.
  bool integerMatmul_ = true;
  bool usesDot4_ = false;
  std::unique_ptr<DeviceBuffer> xq_;
  QuantizedInput quantized_;
  uint64_t separateQuantizations_ = 0, fusedQuantizations_ = 0;
  bool keepQuantized_ = false;                // set while an integer product records its own dispatches
  std::unique_ptr<DeviceBuffer> partials_;    // per-chunk attention states (attention.comp MODE 1)
  std::unique_ptr<DeviceBuffer> candidates_;  // selectCandidates' ids and values
  std::vector<uint8_t> candidatesHost_;       // ... read back
  bool splitAttention_ = true;                // JITLLM_VULKAN_ATTENTION_SPLIT=0: MODE 0 always (A/B runs)
  double prepareSeconds_ = 0;
};

// Every Vulkan device of this machine as the loader sees it, in "vulkan:N" order, unusable ones
// last; empty (never an exception) when there is no loader or no device. For tools and tests.
std::vector<PhysicalDeviceDescription> listVulkanDevices();

}  // namespace jitllm::vulkan
