#include "kernels/vulkan/vulkan_device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "kernels/quant/tensor_type.h"
#include "kernels/vulkan/kernel_variants.h"

namespace jitllm::vulkan {

class VulkanBuffer final : public DeviceBuffer {
 public:
  VulkanBuffer(VulkanDevice& device, Allocation allocation, size_t size)
      : device_(device), allocation_(allocation), size_(size) {}
  ~VulkanBuffer() override { device_.release(allocation_); }
  size_t size() const override { return size_; }
  uint8_t* data() override { return reinterpret_cast<uint8_t*>(allocation_.address); }
  Device& device() override { return device_; }

 private:
  VulkanDevice& device_;
  Allocation allocation_;
  size_t size_;
};

namespace {

// Whether the byte ranges [a, a + aBytes) and [b, b + bBytes) share a byte.
bool rangesOverlap(uint64_t a, uint64_t aBytes, uint64_t b, uint64_t bBytes) {
  return a < b + bBytes && b < a + aBytes;
}

// Share of the device-local heap left to the driver, other processes and our own arena when no
// explicit budget is given.
constexpr uint64_t kHeapReserveDivisor = 16;
// Upload arena: host-visible scratch for op arguments and staged copies. Devices whose memory
// the host can map directly only stage small copies through it.
constexpr VkDeviceSize kArenaBytesMapped = 4ull << 20;
constexpr VkDeviceSize kArenaBytesStaged = 64ull << 20;
// Staged copies move at most this much per arena slice.
constexpr size_t kCopySliceBytes = 16ull << 20;
// Copies into host-mapped memory larger than this wait for queued work and copy directly;
// smaller ones are staged so they need not wait.
constexpr size_t kDirectCopyMinBytes = 1ull << 20;

// Attention with fewer (head, token) workgroups than this spreads each token's chunks of
// positions over workgroups of their own (decode: 32 heads of the 1B shape would leave most of a
// GPU idle over a long context).
constexpr int64_t kSplitAttentionBelow = 256;
// The most candidates select_candidates.comp returns a row (its shared arrays; the sampler's
// kMaxCandidates).
constexpr int64_t kMaxSelectCandidates = 1024;

}  // namespace

std::vector<PhysicalDeviceDescription> listVulkanDevices() {
  try {
    auto instance = VulkanInstance::create();
    std::vector<PhysicalDeviceDescription> out = instance->devices();
    for (auto& d : out) d.handle = VK_NULL_HANDLE;  // the instance goes away with this call
    return out;
  } catch (const Error&) {
    return {};
  }
}

std::unique_ptr<VulkanDevice> VulkanDevice::create(const VulkanDeviceOptions& options) {
  std::unique_ptr<VulkanDevice> d(new VulkanDevice());
  DeviceContext& ctx = d->ctx_;
  ctx.instance = options.instance ? options.instance : VulkanInstance::create();
  ctx.id = "vulkan:" + std::to_string(options.idIndex >= 0 ? options.idIndex : options.index);
  const auto usable = ctx.instance->usableDevices();
  if (options.index < 0 || size_t(options.index) >= usable.size()) {
    std::string found;
    for (const auto& p : ctx.instance->devices()) {
      found += "\n  " + p.name + " (" + p.typeName() + ")" + (p.usable() ? "" : ": unusable, " + p.unusableReason);
    }
    JITLLM_FAIL(kFailed, ctx.id, ": this machine has ", usable.size(), " usable Vulkan device(s)",
                found.empty() ? std::string(" and no others") : ":" + found);
  }
  const PhysicalDeviceDescription& phys = *usable[size_t(options.index)];
  ctx.physical = &phys;
  ctx.queueFamily = phys.computeQueueFamily;
  const VulkanSettings settings = resolveSettings(options.settings);
  const bool dot4 = phys.integerDotProduct && settings.integerDotProduct;
  createLogicalDevice(ctx, dot4);

  const uint64_t heap = phys.deviceLocalBytes();
  d->info_.id = {"vulkan", options.idIndex >= 0 ? options.idIndex : options.index};
  d->info_.memoryBudget = options.memoryBudget ? options.memoryBudget : size_t(heap - heap / kHeapReserveDivisor);
  d->info_.threads = 0;
  d->info_.software = phys.software;
  d->info_.uuid = phys.uuidString();
  d->info_.name =
      phys.name + " (" + phys.driverName + " " + phys.driverInfo + (phys.software ? ", software" : "") + ", Vulkan)";
  d->makeParts(options, settings, dot4);
  return d;
}

void VulkanDevice::makeParts(const VulkanDeviceOptions& options, const VulkanSettings& settings, bool dot4) {
  const PhysicalDeviceDescription& phys = *ctx_.physical;
  const MemoryTypes memory = chooseMemoryTypes(ctx_);
  const VkDeviceSize block =
      std::clamp<VkDeviceSize>(info_.memoryBudget / 16, VkDeviceSize(16) << 20, VkDeviceSize(256) << 20);
  pool_ = std::make_unique<MemoryPool>(ctx_, memory.buffers, memory.mapped, block);
  stream_ = std::make_unique<CommandStream>(ctx_, memory.arena, memory.mapped ? kArenaBytesMapped : kArenaBytesStaged);

  std::vector<std::pair<std::string, std::string>> deviceDefines = {
      {"SUBGROUP_SIZE", std::to_string(phys.subgroupSize)},
      {"MAX_SHARED_BYTES", std::to_string(phys.maxSharedMemoryBytes)},
  };
  if (phys.shaderFloat64) deviceDefines.emplace_back("HAVE_FP64", "1");
  if (dot4) deviceDefines.emplace_back("HAVE_DOT4", "1");
  if (phys.subgroupShuffle && *settings.subgroupShuffle) deviceDefines.emplace_back("HAVE_SUBGROUP_SHUFFLE", "1");
  usesDot4_ = dot4;
  integerMatmul_ = *settings.integerMatmul;
  splitAttention_ = *settings.splitAttention;
  if (*settings.profile) {
    if (phys.timestampPeriodNs > 0) {
      stream_->enableProfile();
    } else {
      std::fprintf(stderr, "%s: JITLLM_VULKAN_PROFILE: the compute queue has no timestamps\n", ctx_.id.c_str());
    }
  }
  const KernelCache cache(options.cacheRoot.value_or(KernelCache::defaultRoot()), phys);
  pipelines_ = std::make_unique<PipelineLibrary>(ctx_, cache, std::move(deviceDefines));
  shapes_ = std::make_unique<MatmulShapes>(ctx_, *stream_, *pipelines_, cache, settings);
}

VulkanDevice::~VulkanDevice() {
  xq_.reset();  // buffers of this device: before the pool goes
  partials_.reset();
  candidates_.reset();
  try {
    if (stream_) stream_->finish();
  } catch (...) {
    // A lost device: tear down anyway.
  }
  if (stream_ && stream_->profile()) stream_->profile()->report(stderr);
  shapes_.reset();
  pipelines_.reset();
  stream_.reset();
  pool_.reset();
  if (ctx_.device) {
    ctx_.fn.vkDeviceWaitIdle(ctx_.device);
    ctx_.fn.vkDestroyDevice(ctx_.device, nullptr);
  }
}

void VulkanDevice::synchronize() { stream_->finish(); }

bool VulkanDevice::responsive() { return stream_->deviceAnswers(); }

std::optional<Device::MemoryReading> VulkanDevice::driverMemory() const {
  const PhysicalDeviceDescription& phys = *ctx_.physical;
  if (!phys.hasMemoryBudget) return std::nullopt;
  // The live figures of the heap our buffers come from (the largest device-local one).
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 memory{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  memory.pNext = &budget;
  ctx_.instance->fn().vkGetPhysicalDeviceMemoryProperties2(phys.handle, &memory);
  uint32_t heap = UINT32_MAX;
  for (uint32_t h = 0; h < memory.memoryProperties.memoryHeapCount; h++) {
    const VkMemoryHeap& m = memory.memoryProperties.memoryHeaps[h];
    if ((m.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
        (heap == UINT32_MAX || m.size > memory.memoryProperties.memoryHeaps[heap].size)) {
      heap = h;
    }
  }
  if (heap == UINT32_MAX || budget.heapBudget[heap] == 0) return std::nullopt;
  return MemoryReading{size_t(budget.heapUsage[heap]), size_t(budget.heapBudget[heap])};
}

std::unique_ptr<DeviceBuffer> VulkanDevice::allocate(size_t bytes) {
  const size_t rounded =
      (std::max<size_t>(bytes, 1) + MemoryPool::kAlignment - 1) / MemoryPool::kAlignment * MemoryPool::kAlignment;
  reserveMemory(rounded);
  try {
    return std::make_unique<VulkanBuffer>(*this, pool_->allocate(rounded), rounded);
  } catch (...) {
    releaseMemory(rounded);
    throw;
  }
}

void VulkanDevice::release(const Allocation& allocation) {
  try {
    if (!stream_->idle()) stream_->finish();  // queued work may still read or write it
  } catch (...) {
    // The device is lost: nothing runs any more, so the memory is free to go.
  }
  pool_->free(allocation);
  releaseMemory(size_t(allocation.size));
}

std::unique_ptr<DeviceBuffer> VulkanDevice::adoptHostBytes(const uint8_t* bytes, size_t size) {
  // A GPU cannot read the mapping in place: the bytes are copied in and count against the budget.
  auto buffer = allocate(size);
  const LocatedRange dst = pool_->locate(reinterpret_cast<uint64_t>(buffer->data()), size);
  if (dst.host) {
    std::memcpy(dst.host, bytes, size);  // fresh memory: no queued work can touch it
  } else {
    stageToDevice(dst, bytes, size);
  }
  return buffer;
}

void VulkanDevice::stageToDevice(const LocatedRange& dst, const uint8_t* src, size_t bytes) {
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kCopySliceBytes);
    const CommandStream::Upload up = stream_->upload(n);
    std::memcpy(up.host, src + done, n);
    VkBufferCopy region{up.offset, dst.offset + done, n};
    ctx_.fn.vkCmdCopyBuffer(stream_->beginCommand(CommandStream::Work::kCopy), up.buffer, dst.buffer, 1, &region);
    stream_->endCommand("copy to the device");
    done += n;
  }
}

void VulkanDevice::copyFromHost(uint8_t* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  quantized_ = {};  // it may overwrite the quantized input
  const LocatedRange range = pool_->locate(reinterpret_cast<uint64_t>(dst), bytes);
  if (range.host && bytes >= kDirectCopyMinBytes) {
    stream_->finish();
    std::memcpy(range.host, src, bytes);
    return;
  }
  stageToDevice(range, static_cast<const uint8_t*>(src), bytes);
}

void VulkanDevice::copyToHost(void* dst, const uint8_t* src, size_t bytes) {
  if (bytes == 0) return;
  const LocatedRange range = pool_->locate(reinterpret_cast<uint64_t>(src), bytes);
  if (range.host) {
    stream_->finish();
    std::memcpy(dst, range.host, bytes);
    return;
  }
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kCopySliceBytes);
    const CommandStream::Upload up = stream_->upload(n);
    VkBufferCopy region{range.offset + done, up.offset, n};
    ctx_.fn.vkCmdCopyBuffer(stream_->beginCommand(CommandStream::Work::kCopy), range.buffer, up.buffer, 1, &region);
    stream_->endCommand("copy to the host");
    stream_->finish();
    std::memcpy(static_cast<uint8_t*>(dst) + done, up.host, n);
    done += n;
  }
}

uint64_t VulkanDevice::address(const void* p, uint64_t bytes, const char* what) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  JITLLM_REQUIRE(a != 0 && pool_->contains(a, std::max<uint64_t>(bytes, 1)), info_.id, ": ", what, " (0x", std::hex, a,
                 std::dec, ", ", bytes, " bytes) is not memory of this device");
  return a;
}

template <typename Push>
void VulkanDevice::dispatch(VkPipeline pipeline, const Push& push, uint32_t x, uint32_t y, uint32_t z) {
  static_assert(sizeof(Push) <= PipelineLibrary::kPushConstantBytes);
  const auto& max = ctx_.physical->maxWorkgroupCount;
  JITLLM_REQUIRE(x <= max[0] && y <= max[1] && z <= max[2], info_.id, ": a grid of ", x, "x", y, "x", z,
                 " workgroups exceeds the device's limits");
  if (x == 0 || y == 0 || z == 0) return;
  if (!keepQuantized_) quantized_ = {};  // this op may write the quantized input
  VkCommandBuffer cb = stream_->beginCommand(CommandStream::Work::kShader);
  ctx_.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  ctx_.fn.vkCmdPushConstants(cb, pipelines_->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Push), &push);
  ctx_.fn.vkCmdDispatch(cb, x, y, z);
  stream_->endCommand(pipelines_->name(pipeline));
}

void VulkanDevice::getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) {
  if (n <= 0) return;
  const char* type = typeDefine(table.type);
  JITLLM_REQUIRE(type != nullptr, info_.id, ": getRows: tensor type ", quant::typeName(table.type),
                 " is not supported");
  for (int64_t i = 0; i < n; i++) {
    JITLLM_REQUIRE(ids[i] >= 0 && ids[i] < table.rows, "token id ", ids[i], " is outside the vocabulary of ",
                   table.rows);
  }
  struct {
    uint64_t table, ids, out;
    uint32_t rowStride, n;
  } push{address(table.data, uint64_t(table.rows) * table.rowStride, "getRows table"), 0,
         address(out, uint64_t(n * table.cols) * 4, "getRows output"), uint32_t(table.rowStride), uint32_t(n)};
  const CommandStream::Upload up = stream_->upload(size_t(n) * sizeof(int32_t));
  std::memcpy(up.host, ids, size_t(n) * sizeof(int32_t));
  push.ids = up.address;
  const VkPipeline p = pipelines_->get(getRowsSpec(table));
  dispatch(p, push, groupsFor(uint64_t(table.cols + 31) / 32, 64), uint32_t(n));
}

void VulkanDevice::rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  if (rows <= 0) return;
  const uint64_t bytes = uint64_t(rows * dim) * 4;
  struct {
    uint64_t x, weight, out, xq;
    float eps;
    uint32_t xqStride;
  } push{address(x, bytes, "rmsNorm input"),
         address(weight, uint64_t(dim) * 4, "rmsNorm weight"),
         address(out, bytes, "rmsNorm output"),
         0,
         eps,
         0};
  // A norm's output is the input of integer products (q, k, v; gate, up; the head) whenever they
  // run at all, so it is quantized here (rms_norm.comp's QUANTIZE) rather than by a quantize_x
  // dispatch of its own. Not in place: the fused part reads x after other invocations wrote out.
  const bool quantize =
      !rangesOverlap(push.x, bytes, push.out, bytes) && fusedQuantizationScratch(rows, dim, push.xq, push.xqStride);
  dispatch(pipelines_->get(rmsNormSpec(dim, quantize)), push, uint32_t(rows));
  if (quantize) noteFusedQuantization(out, rows, dim);
}

bool VulkanDevice::fusedQuantizationScratch(int64_t rows, int64_t cols, uint64_t& xq, uint32_t& xqStride) {
  if (!quantizesRowsOf(cols)) return false;
  const uint64_t rowBytes = uint64_t(quantizedRowBytes(cols));
  growScratch(xq_, rowBytes * uint64_t(rows));
  xq = reinterpret_cast<uint64_t>(xq_->data());
  xqStride = uint32_t(rowBytes);
  return true;
}

void VulkanDevice::noteFusedQuantization(const float* out, int64_t rows, int64_t cols) {
  quantized_ = {out, rows, cols};
  fusedQuantizations_++;
}

bool VulkanDevice::growScratch(std::unique_ptr<DeviceBuffer>& buffer, uint64_t need) {
  if (buffer && buffer->size() >= need) return false;
  // Doubling, not rounding up to a large unit: the scratch counts against the device's budget,
  // which placement fills with models (a tight budget is a test here and a laptop there).
  const uint64_t bytes = std::max<uint64_t>(need, buffer ? 2 * uint64_t(buffer->size()) : 0);
  buffer.reset();  // waits for queued work that reads it
  buffer = allocate(size_t(bytes));
  return true;
}

bool VulkanDevice::integerMatmulFits(const WeightRef& w) const {
  using quant::TensorType;
  if (!integerMatmul_ || w.cols % 256 != 0 || w.rowStride > UINT32_MAX) return false;
  // q4_K is read in aligned words; q6_K's 210-byte blocks are only 2-byte aligned, read as words
  // around them.
  const uint64_t a = reinterpret_cast<uint64_t>(w.data) | w.rowStride;
  return (w.type == TensorType::kQ4_K && a % 4 == 0) || (w.type == TensorType::kQ6_K && a % 2 == 0);
}

void VulkanDevice::matmulInteger(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) {
  const uint64_t rowBytes = uint64_t(quantizedRowBytes(w.cols));
  const uint64_t need = rowBytes * uint64_t(tokens);
  JITLLM_REQUIRE(rowBytes <= UINT32_MAX, info_.id, ": matmul: rows of ", w.cols, " elements are too long");
  if (growScratch(xq_, need)) quantized_ = {};
  const uint64_t xqAddress = reinterpret_cast<uint64_t>(xq_->data());
  keepQuantized_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{keepQuantized_};
  if (!quantized_.holds(x, tokens, w.cols)) {
    struct {
      uint64_t x, xq;
      uint32_t k, xqStride;
    } push{address(x, uint64_t(tokens * w.cols) * 4, "matmul input"), xqAddress, uint32_t(w.cols), uint32_t(rowBytes)};
    dispatch(pipelines_->get(KernelSpec{"quantize_x.comp", {}}), push, groupsFor(uint64_t(w.cols / 32), 64),
             uint32_t(tokens));
    quantized_ = {x, tokens, w.cols};
    separateQuantizations_++;
  }
  struct {
    uint64_t w, xq, y, bias;
    uint32_t rows, tokens, rowStride, xqStride;
  } push{address(w.data, uint64_t(w.rows) * w.rowStride, "matmul weights"),
         xqAddress,
         address(y, uint64_t(tokens * w.rows) * 4, "matmul output"),
         bias ? address(bias, uint64_t(w.rows) * 4, "matmul bias") : 0,
         uint32_t(w.rows),
         uint32_t(tokens),
         uint32_t(w.rowStride),
         uint32_t(rowBytes)};
  // The integer kernel reads xq, never x: dispatching it again gives the same y even in place.
  dispatchMatmul("matmul_int.comp", w, tokens, push, true);
  // A product whose output overwrites its own input leaves xq describing bytes that changed.
  quantized_.forgetIfWritten(y, size_t(tokens * w.rows) * sizeof(float));
}

void VulkanDevice::matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) {
  if (tokens <= 0 || w.rows <= 0) return;
  if (integerMatmulFits(w)) {
    matmulInteger(w, x, tokens, y, bias);
    return;
  }
  const char* type = typeDefine(w.type);
  JITLLM_REQUIRE(type != nullptr, info_.id, ": matmul: tensor type ", quant::typeName(w.type), " is not supported");
  const auto rowBytes = quant::rowBytes(w.type, w.cols);
  JITLLM_REQUIRE(rowBytes && w.rowStride >= *rowBytes && w.rowStride <= UINT32_MAX, info_.id,
                 ": matmul: ", quant::typeName(w.type), " rows of ", w.cols, " elements do not fit a row stride of ",
                 w.rowStride);
  const size_t align = w.type == quant::TensorType::kF32 ? 4 : 2;
  JITLLM_REQUIRE(reinterpret_cast<uint64_t>(w.data) % align == 0 && w.rowStride % align == 0, info_.id,
                 ": matmul: weight rows must be ", align, "-byte aligned");
  struct {
    uint64_t w, x, y, bias;
    uint32_t rows, tokens, rowStride;
  } push{address(w.data, uint64_t(w.rows) * w.rowStride, "matmul weights"),
         address(x, uint64_t(tokens * w.cols) * 4, "matmul input"),
         address(y, uint64_t(tokens * w.rows) * 4, "matmul output"),
         bias ? address(bias, uint64_t(w.rows) * 4, "matmul bias") : 0,
         uint32_t(w.rows),
         uint32_t(tokens),
         uint32_t(w.rowStride)};
  dispatchMatmul("matmul.comp", w, tokens, push,
                 !rangesOverlap(push.x, uint64_t(tokens * w.cols) * 4, push.y, uint64_t(tokens * w.rows) * 4));
}

template <typename Push>
void VulkanDevice::dispatchMatmul(const char* shader, const WeightRef& w, int64_t tokens, const Push& push,
                                  bool repeatable) {
  // Tokens per workgroup grow with the batch up to 8; the rows per workgroup (WR x NR) are
  // MatmulShapes'. None of it changes the summation order (shaders/matmul.comp, matmul_int.comp).
  const int tt = matmulTokensPerGroup(tokens);
  const KernelSpec variant = matmulVariant(shader, w, tt);
  MatmulTuner::Shape shape = MatmulTuner::kDefault;
  std::string tuningKey;
  if (!shapes_->known(variant, w, tokens, shape, tuningKey) && shapes_->tunes() && repeatable) {
    shape = shapes_->time(variant, tt, w, tokens, tuningKey, [&](VkPipeline p, uint32_t groups, uint32_t tokenGroups) {
      dispatch(p, push, groups, tokenGroups);
    });
  }
  KernelSpec spec = variant;
  spec.define("WR", int64_t(shape.wr)).define("NR", int64_t(shape.nr));
  dispatch(pipelines_->get(spec), push, groupsFor(uint64_t(w.rows), uint64_t(shape.wr * shape.nr)),
           groupsFor(uint64_t(tokens), uint64_t(tt)));
}

void VulkanDevice::rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
                        const RopeParams& params) {
  const int half = params.rotaryDims / 2;
  JITLLM_REQUIRE(params.rotaryDims > 0 && params.rotaryDims <= headDim && params.rotaryDims % 2 == 0,
                 "rope: rotary dims ", params.rotaryDims, " do not fit head dim ", headDim);
  if (tokens <= 0) return;
  const uint64_t table = rope_.address(positions, tokens, params, *stream_);
  struct {
    uint64_t x, table;
    uint32_t tokens, heads;
  } push{address(x, uint64_t(tokens * heads * headDim) * 4, "rope input"), table, uint32_t(tokens), uint32_t(heads)};
  const VkPipeline p = pipelines_->get(ropeSpec(headDim, params.rotaryDims, params.neox));
  dispatch(p, push, groupsFor(uint64_t(tokens) * uint64_t(heads) * uint64_t(half), kElementwiseWorkgroup));
}

void VulkanDevice::kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots,
                           const KvLayout& layout) {
  if (tokens <= 0) return;
  const int64_t width = int64_t(layout.kvHeads) * layout.headDim;
  const CommandStream::Upload up = stream_->upload(size_t(tokens) * 16);
  for (int64_t t = 0; t < tokens; t++) {
    JITLLM_REQUIRE(slots[t].slot >= 0 && slots[t].slot < layout.pageTokens, "kvStore: slot ", slots[t].slot,
                   " is outside a page of ", layout.pageTokens, " tokens");
    const uint64_t page = address(slots[t].page, layout.pageBytes(), "kvStore page");
    const uint32_t words[4] = {uint32_t(page), uint32_t(page >> 32), uint32_t(slots[t].slot), 0};
    std::memcpy(up.host + t * 16, words, sizeof words);
  }
  struct {
    uint64_t k, v, slots;
    uint32_t tokens;
  } push{address(k, uint64_t(tokens * width) * 4, "kvStore K"), address(v, uint64_t(tokens * width) * 4, "kvStore V"),
         up.address, uint32_t(tokens)};
  const VkPipeline p = pipelines_->get(kvStoreSpec(layout));
  dispatch(p, push, groupsFor(uint64_t(tokens * width), kElementwiseWorkgroup));
}

VulkanDevice::AttentionPages VulkanDevice::attentionPages(const AttentionBatch& batch) const {
  // With a sliding window, pages that end before every one of a table's users' windows may have
  // been freed (null entries): they go up as 0, unchecked, and the shader never reads them
  // (attention.comp starts each token's positions at its window).
  const int64_t window = std::max(0, batch.window);
  const KvLayout& kv = batch.kv;
  AttentionPages p;
  for (int64_t t = 0; t < batch.tokens; t++) {
    JITLLM_REQUIRE(batch.positions[t] >= 0, "attention: negative position ", batch.positions[t]);
    const int64_t seen = int64_t(batch.positions[t]) + 1, start = window > 0 ? std::max<int64_t>(0, seen - window) : 0;
    p.maxPositions = std::max(p.maxPositions, seen - start);
    auto& e = p.tables[batch.pageTables[t]];
    e.pages = std::max(e.pages, uint32_t(batch.positions[t] / kv.pageTokens + 1));
    e.used = std::min(e.used, uint32_t(start / kv.pageTokens));
  }
  for (auto& [table, e] : p.tables) {
    e.first = p.totalPages;
    p.totalPages += e.pages;
  }
  return p;
}

CommandStream::Upload VulkanDevice::uploadAttentionPages(const AttentionBatch& batch, const AttentionPages& p) {
  const size_t infoBytes = size_t(batch.tokens) * 8;
  const CommandStream::Upload up = stream_->upload(infoBytes + size_t(p.totalPages) * 8);
  for (int64_t t = 0; t < batch.tokens; t++) {
    const uint32_t words[2] = {uint32_t(batch.positions[t]), p.tables.at(batch.pageTables[t]).first};
    std::memcpy(up.host + t * 8, words, sizeof words);
  }
  for (const auto& [table, e] : p.tables) {
    for (uint32_t i = 0; i < e.pages; i++) {
      const uint64_t page = i < e.used ? 0 : address(table[i], batch.kv.pageBytes(), "attention KV page");
      std::memcpy(up.host + infoBytes + size_t(e.first + i) * 8, &page, 8);
    }
  }
  return up;
}

void VulkanDevice::attention(const float* q, float* out, const AttentionBatch& batch) {
  if (batch.tokens <= 0) return;
  const KvLayout& kv = batch.kv;
  JITLLM_REQUIRE(kv.kvHeads > 0 && batch.heads % kv.kvHeads == 0, "attention: ", batch.heads,
                 " heads are not a multiple of ", kv.kvHeads, " KV heads");
  const AttentionPages pages = attentionPages(batch);
  // Few workgroups (decode: one per head) over a long context: each chunk of positions gets its
  // own workgroup, and a second pass folds the chunks in order - the same bits as one workgroup
  // per head and token folding as it goes (shaders/attention.comp). The scratch grows before
  // anything is uploaded: growing waits for the queue, which recycles the upload arena.
  const uint32_t maxChunks = uint32_t((pages.maxPositions + kAttentionWorkgroup - 1) / kAttentionWorkgroup);
  const bool split = splitAttention_ && batch.tokens * batch.heads < kSplitAttentionBelow && maxChunks > 1 &&
                     maxChunks <= ctx_.physical->maxWorkgroupCount[2];
  if (split) {
    const uint64_t bytes =
        uint64_t(batch.tokens) * uint64_t(batch.heads) * maxChunks * uint64_t(kv.headDim + 2) * sizeof(float);
    growScratch(partials_, bytes);
  }
  // The output is the output projection's input: quantized here (attention.comp's QUANTIZE), as
  // rmsNorm does for the products after it.
  const int64_t width = int64_t(batch.heads) * kv.headDim;
  uint64_t xq = 0;
  uint32_t xqStride = 0;
  const bool quantize = kv.headDim % 32 == 0 && fusedQuantizationScratch(batch.tokens, width, xq, xqStride);
  const CommandStream::Upload up = uploadAttentionPages(batch, pages);
  const uint64_t qBytes = uint64_t(batch.tokens) * uint64_t(batch.heads) * uint64_t(kv.headDim) * 4;
  struct {
    uint64_t q, out, info, pages, partials, xq;
    float scale;
    uint32_t maxChunks, xqStride, window;
  } push{address(q, qBytes, "attention queries"),
         address(out, qBytes, "attention output"),
         up.address,
         up.address + uint64_t(batch.tokens) * 8,
         0,
         xq,
         batch.scale,
         0,
         xqStride,
         uint32_t(std::max(0, batch.window))};
  const auto pipeline = [&](int mode) { return pipelines_->get(attentionSpec(kv, batch.heads, mode, quantize)); };
  if (split) {
    push.partials = reinterpret_cast<uint64_t>(partials_->data());
    push.maxChunks = maxChunks;
    dispatch(pipeline(1), push, uint32_t(batch.heads), uint32_t(batch.tokens), maxChunks);
    dispatch(pipeline(2), push, uint32_t(batch.heads), uint32_t(batch.tokens));
  } else {
    dispatch(pipeline(0), push, uint32_t(batch.heads), uint32_t(batch.tokens));
  }
  if (quantize) noteFusedQuantization(out, batch.tokens, width);
}

void VulkanDevice::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n <= 0) return;
  gatedActivation("swiglu.comp", address(gate, uint64_t(n) * 4, "swiglu gate"),
                  address(up, uint64_t(n) * 4, "swiglu up"), address(out, uint64_t(n) * 4, "swiglu output"), n);
}

void VulkanDevice::geglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n <= 0) return;
  gatedActivation("geglu.comp", address(gate, uint64_t(n) * 4, "geglu gate"), address(up, uint64_t(n) * 4, "geglu up"),
                  address(out, uint64_t(n) * 4, "geglu output"), n);
}

void VulkanDevice::gatedActivation(const char* shader, uint64_t gate, uint64_t up, uint64_t out, int64_t n) {
  const uint32_t groups = std::min<uint32_t>(groupsFor(uint64_t(n), kElementwiseWorkgroup), 65535);
  struct {
    uint64_t gate, up, out;
    uint32_t n, stride;
  } push{gate, up, out, uint32_t(n), groups * kElementwiseWorkgroup};
  dispatch(pipelines_->get(KernelSpec{shader, {}}), push, groups);
}

void VulkanDevice::add(float* x, const float* y, int64_t n) {
  if (n <= 0) return;
  const uint32_t groups = std::min<uint32_t>(groupsFor(uint64_t(n), kElementwiseWorkgroup), 65535);
  struct {
    uint64_t x, y;
    uint32_t n, stride;
  } push{address(x, uint64_t(n) * 4, "add x"), address(y, uint64_t(n) * 4, "add y"), uint32_t(n),
         groups * kElementwiseWorkgroup};
  dispatch(pipelines_->get(KernelSpec{"add.comp", {}}), push, groups);
}

void VulkanDevice::scale(float* x, float s, int64_t n) {
  if (n <= 0) return;
  const uint32_t groups = std::min<uint32_t>(groupsFor(uint64_t(n), kElementwiseWorkgroup), 65535);
  struct {
    uint64_t x;
    float s;
    uint32_t n, stride;
  } push{address(x, uint64_t(n) * 4, "scale x"), s, uint32_t(n), groups * kElementwiseWorkgroup};
  dispatch(pipelines_->get(KernelSpec{"scale.comp", {}}), push, groups);
}

void VulkanDevice::selectCandidates(float* logits, int64_t rows, int64_t vocab,
                                    std::span<const CandidateRequest> requests, int32_t* ids, float* values,
                                    int64_t stride) {
  JITLLM_REQUIRE(int64_t(requests.size()) == rows, "selectCandidates: ", requests.size(), " requests for ", rows,
                 " rows");
  if (rows == 0) return;
  JITLLM_REQUIRE(vocab > 0 && vocab < (int64_t(1) << 31) && stride > 0 && stride <= (int64_t(1) << 20) &&
                     rows <= int64_t(ctx_.physical->maxWorkgroupCount[0]),
                 info_.id, ": selectCandidates: ", rows, " rows of ", vocab, " logits, stride ", stride);
  const CandidateTable t = planCandidateTable(requests, stride, kMaxSelectCandidates, info_.id.str());
  const uint64_t outBytes = uint64_t(rows) * uint64_t(stride) * 4;
  growScratch(candidates_, 2 * outBytes);  // before the upload: growing waits, which recycles the arena
  const CommandStream::Upload up = stream_->upload(t.bytes());  // the requests (kernels/candidates.h)
  packCandidateTable(requests, t, up.host);
  const uint64_t out = reinterpret_cast<uint64_t>(candidates_->data());
  struct {
    uint64_t logits, counts, penaltyStart, penaltyIds, penalties, outIds, outValues;
    uint32_t vocab, stride;
  } push{address(logits, uint64_t(rows * vocab) * 4, "selectCandidates logits"),
         up.address,
         up.address + t.startsOffset(),
         up.address + t.idsOffset(),
         up.address + t.penaltiesOffset(),
         out,
         out + outBytes,
         uint32_t(vocab),
         uint32_t(stride)};
  dispatch(pipelines_->get(selectCandidatesSpec()), push, uint32_t(rows));
  // Ids and values side by side: one read-back.
  candidatesHost_.resize(size_t(2 * outBytes));
  copyToHost(candidatesHost_.data(), candidates_->data(), size_t(2 * outBytes));
  std::memcpy(ids, candidatesHost_.data(), size_t(outBytes));
  std::memcpy(values, candidatesHost_.data() + outBytes, size_t(outBytes));
}

bool VulkanDevice::quantizesRowsOf(int64_t cols) const {
  // Only the integer products read the integer form, and only rows of whole 256-element blocks.
  return integerMatmul_ && cols % 256 == 0 && uint64_t(quantizedRowBytes(cols)) <= UINT32_MAX;
}

void VulkanDevice::wantProducts(const KernelWorkload& workload, std::vector<KernelSpec>& specs,
                                std::vector<Untimed>& untimed) {
  // Products at every tokens-per-workgroup width a step can use, in the shape the op will take;
  // those not timed yet get all their candidates, and are timed (timeProducts).
  std::set<std::string> untimedKeys;  // layers share shapes: each is timed once
  for (const auto& group : workload.products) {
    for (const WeightRef& w : group) {
      if (w.rows <= 0 || typeDefine(w.type) == nullptr) continue;
      const char* shader = integerMatmulFits(w) ? "matmul_int.comp" : "matmul.comp";
      for (int tt : {1, 2, 4, 8}) {
        if (tt > 1 && tt / 2 >= workload.maxTokens) break;  // no step has that many tokens
        const KernelSpec variant = matmulVariant(shader, w, tt);
        MatmulTuner::Shape shape;
        std::string key;
        std::vector<MatmulTuner::Shape> shapes;
        if (shapes_->known(variant, w, tt, shape, key) || !shapes_->tunes()) {
          shapes = {shape};
        } else {
          shapes = shapes_->candidates(tt);
          if (untimedKeys.insert(key).second) untimed.push_back({w, tt});
        }
        for (const MatmulTuner::Shape& c : shapes) {
          KernelSpec spec = variant;
          specs.push_back(spec.define("WR", int64_t(c.wr)).define("NR", int64_t(c.nr)));
        }
      }
      if (integerMatmulFits(w)) specs.push_back(KernelSpec{"quantize_x.comp", {}});
    }
  }
}

void VulkanDevice::timeProducts(const std::vector<Untimed>& untimed) {
  // Each such product run once at its width on scratch operands, as its first step would (its
  // pipelines are all made by now).
  int64_t cols = 0, rows = 0;
  for (const Untimed& u : untimed) {
    cols = std::max(cols, u.w.cols);
    rows = std::max(rows, u.w.rows);
  }
  try {
    auto x = allocate(size_t(8 * cols) * sizeof(float));
    auto y = allocate(size_t(8 * rows) * sizeof(float));
    const std::vector<float> zeros(size_t(8 * cols), 0.0f);
    copyFromHost(x->data(), zeros.data(), zeros.size() * sizeof(float));
    struct Forget {  // the quantized input named the scratch, which goes at the end of this scope
      QuantizedInput& q;
      ~Forget() { q = {}; }
    } forget{quantized_};
    for (const Untimed& u : untimed) {
      matmul(u.w, reinterpret_cast<const float*>(x->data()), u.tt, reinterpret_cast<float*>(y->data()), nullptr);
    }
    synchronize();
  } catch (const Error& e) {
    // No memory for the scratch, say: the first step that meets such a product times it then.
    std::fprintf(stderr, "%s: prepareKernels: products left untimed: %s\n", info_.id.str().c_str(), e.what());
  }
}

size_t VulkanDevice::prepareKernels(const KernelWorkload& workload) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<KernelSpec> specs;
  std::vector<Untimed> untimed;
  wantProducts(workload, specs, untimed);
  for (const WeightRef& table : workload.tables) {
    if (typeDefine(table.type) != nullptr) specs.push_back(getRowsSpec(table));
  }
  for (int64_t dim : workload.normDims) {
    specs.push_back(rmsNormSpec(dim, false));
    if (quantizesRowsOf(dim)) specs.push_back(rmsNormSpec(dim, true));
  }
  for (const KernelWorkload::Attention& a : workload.attention) {
    const KvLayout& kv = a.kv;
    if (kv.kvHeads <= 0 || a.heads % kv.kvHeads != 0) continue;
    const bool quantize = kv.headDim % 32 == 0 && quantizesRowsOf(int64_t(a.heads) * kv.headDim);
    specs.push_back(attentionSpec(kv, a.heads, 0, quantize));
    if (splitAttention_) {
      specs.push_back(attentionSpec(kv, a.heads, 1, quantize));
      specs.push_back(attentionSpec(kv, a.heads, 2, quantize));
    }
    specs.push_back(ropeSpec(kv.headDim, a.rotaryDims > 0 ? a.rotaryDims : kv.headDim, a.neox));
    specs.push_back(kvStoreSpec(kv));
  }
  if (workload.elementwise) {
    for (const char* shader : {"swiglu.comp", "geglu.comp", "add.comp", "scale.comp"}) specs.push_back({shader, {}});
  }
  if (workload.candidates) specs.push_back(selectCandidatesSpec());
  size_t made = pipelines_->prepare(specs);
  if (!untimed.empty()) timeProducts(untimed);
  pipelines_->markPrepared();
  prepareSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return made;
}

}  // namespace jitllm::vulkan
