// Device: one execution target (cpu:0, cuda:1, vulkan:0) as the runtime and the scheduler see it.
//
// A Device owns its memory (buffers it allocates), its execution resources (threads, streams,
// queues) and the kernels compiled for it. The model graph is written once against this
// interface: every op takes pointers in the device's own address space (host pointers on the CPU,
// device addresses on a GPU) and small host-side descriptions (token ids, positions, KV page
// tables) that the device brings over itself. Ops run in call order; results are visible to the
// next op and to copyToHost once the op returns (a GPU backend may queue, but must keep that
// ordering and synchronise in copyToHost).
//
// Memory accounting is explicit: allocate() throws Error(OVERLOADED) when the device's budget is
// spent, so callers can page out or refuse instead of crashing.
//
// Thread-safety: a Device is driven by one thread at a time (its executor); info(),
// memoryUsed(), driverMemory() and the busy time may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/device_id.h"
#include "kernels/candidates.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm {

// What a device can do that callers plan around, stated by the device rather than inferred from
// its backend's name.
struct DeviceCapabilities {
  // Its memory is host memory: it reads weights in the mapped file in place (adoptHostBytes is a
  // view, outside the budget), bytes move to and from it with memcpy, and a migration between two
  // such devices copies just the KV bytes written since its pre-copy.
  bool hostMemory = false;
  // Its kernels are compiled into the program: running a unit's ops once before its first real
  // step (the warm-up a migration does on a GPU, whose kernels compile on first use) gains nothing.
  bool kernelsCompiledIn = false;
};

struct DeviceInfo {
  DeviceId id;              // "cpu:0": backend name and index, unique on this machine
  std::string name;         // human-readable: model name and the kernel variant chosen
  size_t memoryBudget = 0;  // bytes this device will hand out, in total
  int threads = 1;          // CPU: worker threads; GPU: 0
  bool software = false;    // an emulated device (lavapipe): usable, but placed last
  // The GPU's UUID, 8-4-4-4-12 hex as nvidia-smi prints it (without "GPU-"); the same for one GPU
  // seen through CUDA and Vulkan, and how NVML's readings are matched to devices. Empty: none (CPU).
  std::string uuid;
  DeviceCapabilities caps;
};

// 16 UUID bytes as DeviceInfo::uuid spells them.
std::string formatUuid(const uint8_t* bytes);

// Where jitllm caches what it learns about this machine (compiled kernels, measured device
// speeds): $JITLLM_CACHE_DIR (empty: no disk cache), else $XDG_CACHE_HOME/jitllm, else
// ~/.cache/jitllm; "" when none of them is set.
std::string cacheRoot();

class Device;

// Host memory a device reads at full speed (pinned on a GPU): where streamed weights wait between
// their trips into device memory. Destroying it frees it.
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
};

// Memory owned by one device. Destroying it returns the memory to the device's pool.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual size_t size() const = 0;
  virtual uint8_t* data() = 0;  // an address in the device's space
  virtual Device& device() = 0;
};

// A matrix in its file layout (rows of `cols` elements, quantized in blocks along a row), in the
// device's address space.
struct WeightRef {
  quant::TensorType type = quant::TensorType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t rowStride = 0;  // bytes from one row to the next
};

struct RopeParams {
  int rotaryDims = 0;  // leading dims of each head that rotate
  float freqBase = 10000.0f;
  float freqScale = 1.0f;              // linear context scaling: positions are multiplied by this
  const float* freqFactors = nullptr;  // host; rotaryDims/2 divisors (llama3 rope_freqs) or null
  bool neox = false;                   // rotate halves (qwen2) instead of adjacent pairs (llama)
  // LongRoPE's attention factor (ggml's mscale): cos and sin, each rounded to float, are multiplied
  // by it, so it scales the rotated dims of q and k and leaves the dims past rotaryDims alone (as
  // llama.cpp and Hugging Face's Phi-3 do with partial rotary).
  float attnFactor = 1.0f;
};

// What the KV cache stores. fp16 halves the memory and the bytes a migration moves; fp32 keeps
// attention as exact as the rest of the float32 pass (fp16 K/V costs about 1e-4 relative error in
// the logits, enough to flip a near-tie in greedy decoding).
enum class KvPrecision { kF16, kF32 };

// How KV lives in a page: pageTokens tokens of K then the same of V, each token's heads
// contiguous.
struct KvLayout {
  int pageTokens = 16;
  int kvHeads = 0;
  int headDim = 0;
  KvPrecision precision = KvPrecision::kF32;
  size_t elementBytes() const { return precision == KvPrecision::kF16 ? 2 : 4; }
  size_t tokenBytes() const { return size_t(kvHeads) * size_t(headDim) * elementBytes(); }  // one of K or V
  size_t pageBytes() const { return 2 * size_t(pageTokens) * tokenBytes(); }
};

// Where one token's K and V go: a page (device address) and the token's slot in it.
struct KvSlot {
  uint8_t* page = nullptr;
  int slot = 0;
};

// One of several matrix products of the same input (Device::matmuls).
struct MatmulTarget {
  WeightRef w;
  float* y = nullptr;
  const float* bias = nullptr;
};

// Attention for a batch of query tokens over paged KV. Token t attends to positions
// [first(t), positions[t]] of its session, whose pages are pageTables[t][0..]: first(t) is 0, or
// with a sliding window (window > 0) max(0, positions[t] - window + 1). Pages that end before
// first(t) may have been freed: their entries in the page table can be null and are never read.
struct AttentionBatch {
  int64_t tokens = 0;
  int heads = 0;
  KvLayout kv;
  float scale = 1.0f;
  int window = 0;                      // > 0: the sliding window of the layer (gemma3's local layers), in tokens
  const int32_t* positions = nullptr;  // host, per token
  const uint8_t* const* const* pageTables = nullptr;  // host, per token: page addresses
};

// What a model's steps will run on a device, for Device::prepareKernels: every shape an op of a
// step can take there, at any token count from 1 to maxTokens.
struct KernelWorkload {
  // The matrices of each matmuls() call (one matrix: a plain matmul), in the order passed.
  std::vector<std::vector<WeightRef>> products;
  std::vector<WeightRef> tables;  // getRows' tables (token embeddings; f32 rows the head gathers)
  struct Attention {
    int heads = 0;
    KvLayout kv;
    int rotaryDims = 0;  // ropeAndStore's RopeParams (0: the head dim)
    bool neox = false;
  };
  std::vector<Attention> attention;  // with ropeAndStore's and kvStore's shapes
  int64_t maxTokens = 1;             // the most tokens one op of a step takes
  bool elementwise = false;          // rmsNorm, swiglu, geglu, add, rope
  std::vector<int64_t> normDims;     // the row lengths rmsNorm takes
  bool candidates = false;           // selectCandidates (the head)
};

class Device {
 public:
  virtual ~Device() = default;

  const DeviceInfo& info() const { return info_; }
  // Bytes handed out now, against info().memoryBudget. Any thread.
  size_t memoryUsed() const { return used_.load(std::memory_order_relaxed); }
  // What the driver says of the device's memory now, where it can tell more than our own
  // accounting (Vulkan with VK_EXT_memory_budget): what this process uses, and what it may use in
  // all - which shrinks when other programs take memory. Unset elsewhere (NVML covers NVIDIA GPUs).
  struct MemoryReading {
    size_t used = 0;
    size_t available = 0;
  };
  virtual std::optional<MemoryReading> driverMemory() const { return std::nullopt; }

  // Time the model step loops spent on this device (their ops and waiting for them; the
  // scheduler turns it into the utilisation `jitllmctl devices` shows where no vendor counter
  // does). Any thread.
  void addBusyTime(std::chrono::nanoseconds t) { busyNs_.fetch_add(uint64_t(t.count()), std::memory_order_relaxed); }
  uint64_t busyNanoseconds() const { return busyNs_.load(std::memory_order_relaxed); }

  // Memory. allocate throws Error(OVERLOADED) when the budget would be exceeded.
  virtual std::unique_ptr<DeviceBuffer> allocate(size_t bytes) = 0;
  // Makes host bytes (e.g. an mmapped weight) usable by this device's ops. A device that can
  // read host memory directly (the CPU) returns a view and copies nothing; the bytes must then
  // outlive the buffer.
  virtual std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) = 0;
  virtual void copyFromHost(uint8_t* dst, const void* src, size_t bytes) = 0;
  virtual void copyToHost(void* dst, const uint8_t* src, size_t bytes) = 0;

  // Device-to-device: `bytes` from this device's `src` to `dst` on `target`. The default stages
  // through host memory in chunks; a backend overrides it with the fastest path the two devices
  // share (the CPU hands its host bytes straight to the target; a GPU backend copies inside
  // itself or over a peer link). The caller must be the only thread driving either device.
  virtual void copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes);
  // Equal-sized blocks (KV pages) at device addresses to and from one contiguous host buffer, so
  // a migration's pause moves all its open pages in one transfer. The defaults copy block by
  // block; a GPU backend gathers and scatters with one kernel and one transfer.
  virtual void gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes);
  virtual void scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes);
  // The same blocks straight to `target`'s blocks `to`, device to device, when the two devices have
  // a path that skips host memory (two CUDA devices: a gather, one peer copy, a scatter). Returns
  // false, having done nothing, when they have none - the caller then goes through the host
  // (gatherToHost + scatterFromHost). On true the blocks are in place for target's later ops and
  // `from` may be reused. Default: false. The caller must be the only thread driving either device.
  virtual bool moveBlocksTo(Device& target, const uint8_t* const* from, uint8_t* const* to, size_t count,
                            size_t blockBytes);
  // A hint before latency-critical host work between ops (a migration's pause): release what idles
  // busily - the CPU's spinning workers - so it does not compete for the cores. Default: nothing.
  virtual void quiesce() {}
  // False once the device has stopped answering (unplugged, lost, reset): the daemon asks after
  // an op failed with DISCONNECTED, to know which device to re-place models from. May be called
  // from any thread. Default: a device that cannot vanish (the CPU).
  virtual bool responsive() { return true; }

  // Streaming weights through device memory (a model larger than the device): a transfer queue
  // beside the ops, ordered by tickets.
  //   mark = markOps()                         a point after the ops queued so far
  //   up = uploadAsync(dst, src, n, mark)      copies once the ops before `mark` are done (0: now)
  //   waitForUpload(up)                        ops queued after this see the bytes
  // `src` must come from allocateStreamSource() and stay untouched until the upload is waited
  // for. The defaults copy at once (no overlap) on ordinary host memory; the CUDA backend copies
  // from pinned memory on its own stream while the ops run.
  virtual std::unique_ptr<HostBuffer> allocateStreamSource(size_t bytes);
  virtual uint64_t markOps() { return 0; }
  virtual uint64_t uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t afterMark);
  virtual void waitForUpload(uint64_t upload) {}

  // Ops. Float activations are row-major [rows x dim] f32.
  virtual void getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) = 0;
  virtual void rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) = 0;
  // y[t][r] = sum_k w[r][k] * x[t][k] (+ bias[r] when bias is not null).
  virtual void matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) = 0;
  virtual void rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
                    const RopeParams& params) = 0;
  virtual void kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) = 0;
  virtual void attention(const float* q, float* out, const AttentionBatch& batch) = 0;
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // GEGLU with GELU's tanh form (gemma): out[i] = gelu(gate[i]) * up[i], where
  // gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), computed in every backend as its
  // equal g / (1 + exp(-z)) * up[i] with z = g * fma(0.0713548139, g * g, 1.59576917) (float
  // constants: sqrt(8/pi) and 0.044715 times it), the form of swiglu with z for g in the
  // exponent; backends differ only in exp.
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // x[i] *= s: the multipliers of architectures that scale embeddings, residual branches or
  // logits (granite), one correctly rounded product each.
  virtual void scale(float* x, float s, int64_t n) = 0;
  // x[i] = cap * tanh(x[i] / cap): a final logit soft-cap (gemma's final_logit_softcapping).
  // Default: through host memory (no model in common use sets it; a device may do better).
  virtual void softcap(float* x, float cap, int64_t n);

  // Ops made of the ones above, which a device may run in fewer passes or launches; each gives
  // exactly the results of the plain sequence (the default runs it).
  // matmul(t.w, x, tokens, t.y, t.bias) for each target: the products of one input (a layer's q,
  // k and v; gate and up). No target's y may overlap x or another target's y.
  virtual void matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens);
  // rope(q, heads), rope(k, kvHeads) at the same positions, then kvStore(k, v): the rotated K and
  // V of each token into its slot.
  virtual void ropeAndStore(float* q, float* k, const float* v, int64_t tokens, int heads, int kvHeads,
                            const int32_t* positions, const RopeParams& params, const KvSlot* slots,
                            const KvLayout& layout);

  // The first half of sampling (kernels/candidates.h), on the device that computed the logits: for
  // each of `rows` rows of `logits` (device memory, `vocab` floats each), its best
  // requests[r].count candidates after the repetition penalty, written to the host arrays `ids`
  // and `values` from r * stride on. May overwrite `logits` (the penalty is applied in place).
  // The results are selectCandidates()'s bit for bit on every backend. Default: each row copied to
  // the host and selected there; a GPU selects on the device and copies back only the candidates.
  virtual void selectCandidates(float* logits, int64_t rows, int64_t vocab, std::span<const CandidateRequest> requests,
                                int32_t* ids, float* values, int64_t stride);

  // The rows of a step's activations that hold prompt tokens (not tokens the model just produced):
  // until the next call, a product (matmul, matmuls) over exactly `tokens` rows may compute the
  // rows in `ranges` on a prompt path of its own - faster for many tokens, its bits a function of
  // the token's own row (so independent of the batch and of how a prompt was chunked) but not
  // decode's bits. CUDA's is fp16 tensor cores (docs/cuda.md), the CPU's byte activations
  // (docs/cpu-kernels.md); the default ignores the hint, which is always correct. Empty `ranges`:
  // every row takes the ordinary path. Ranges are sorted, disjoint and within [0, tokens).
  struct RowRange {
    int64_t begin = 0, end = 0;
  };
  virtual void setPromptRows(std::span<const RowRange> ranges, int64_t tokens) {}

  // Makes ready every kernel `workload` can meet, before a step needs it: a backend that compiles
  // kernels at run time compiles them now - in parallel where it can, from its disk cache where it
  // has them - so no request waits for a compile. Returns how many it had to make (0: all were
  // ready). Default: nothing to make (kernels compiled in). Ops still make a kernel a workload
  // did not foresee, when they meet it.
  virtual size_t prepareKernels(const KernelWorkload& workload) { return 0; }

  // Threads that share a device (two models' workers on one GPU, a load binding weights there)
  // take turns through this mutex, with DeviceLocks.
  std::mutex& executorMutex() { return executorMutex_; }

 protected:
  // Takes `bytes` of the budget for an allocation, or throws Error(OVERLOADED) saying how much is
  // free - before the backend asks its driver, so a full device refuses at once and alike on every
  // backend. Any thread.
  void reserveMemory(size_t bytes);
  // Gives back what reserveMemory took (the allocation was freed, or failed after all). Any thread.
  void releaseMemory(size_t bytes) noexcept { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  // Counts memory an op must have to run at all (a GPU's scratch growing for a larger batch)
  // without refusing it: failing there would fail a step the budget already admitted. Any thread.
  void chargeMemory(size_t bytes) noexcept { used_.fetch_add(bytes, std::memory_order_relaxed); }

  // Set by the backend while it is made; read-only afterwards.
  DeviceInfo info_;

 private:
  std::atomic<size_t> used_{0};
  std::mutex executorMutex_;
  std::atomic<uint64_t> busyNs_{0};
};

// Holds the executor mutexes of a set of devices for its lifetime: each device once, in address
// order, so any two holders agree on the order and cannot deadlock. Null entries are skipped.
class DeviceLocks {
 public:
  explicit DeviceLocks(std::vector<Device*> devices);
  DeviceLocks(const DeviceLocks&) = delete;
  DeviceLocks& operator=(const DeviceLocks&) = delete;
  bool holds(const Device* device) const;

 private:
  std::vector<Device*> devices_;
  std::vector<std::unique_lock<std::mutex>> locks_;
};

}  // namespace jitllm
