#include "kernels/cpu/cpu_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_tuner.h"
#include "kernels/cpu/gemm/matmul.h"
#include "kernels/cpu/gemm/packed_rows.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"

namespace jitllm::cpu {

// Buffers are aligned for the widest vector loads (AVX-512) and for whole cache lines.
static constexpr size_t kBufferAlignment = 64;

// Buffers this large are mapped straight from the kernel, so freeing one always returns its
// memory to the OS (malloc would keep it in its heap, and a device's memory would never shrink).
static constexpr size_t kMapThreshold = 256 * 1024;

class CpuBuffer final : public DeviceBuffer {
 public:
  enum class Origin { kAdopted, kHeap, kMapped };
  CpuBuffer(CpuDevice& device, uint8_t* data, size_t size, Origin origin)
      : device_(device), data_(data), size_(size), origin_(origin) {}
  ~CpuBuffer() override {
    if (origin_ == Origin::kAdopted) device_.packed_.forget(this);
    if (origin_ == Origin::kHeap) std::free(data_);
    if (origin_ == Origin::kMapped) ::munmap(data_, size_);
    if (origin_ != Origin::kAdopted) device_.release(size_);
  }
  size_t size() const override { return size_; }
  uint8_t* data() override { return data_; }
  Device& device() override { return device_; }

 private:
  CpuDevice& device_;
  uint8_t* data_;
  size_t size_;
  Origin origin_;
};

namespace {

// The memory.max of this process's cgroup (v2), the limit systemd's MemoryMax= sets; 0 when there
// is none ("max") or no cgroup v2.
size_t cgroupMemoryMax() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);  // the v2 hierarchy's line
  }
  if (path.empty()) return 0;
  std::ifstream limit("/sys/fs/cgroup" + path + "/memory.max");
  std::string value;
  if (!(limit >> value) || value == "max") return 0;
  try {
    return size_t(std::stoull(value));
  } catch (const std::exception&) {
    return 0;
  }
}

// What a CPU device may hand out by default: the machine's memory, or the service's cgroup limit
// when that is lower.
size_t physicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageSize = sysconf(_SC_PAGE_SIZE);
  const size_t ram = pages > 0 && pageSize > 0 ? size_t(pages) * size_t(pageSize) : size_t(1) << 32;
  const size_t cgroup = cgroupMemoryMax();
  return cgroup ? std::min(ram, cgroup) : ram;
}

CpuTuning tuningFor(const CpuDeviceOptions& options) {
  if (options.tuning) return *options.tuning;
  return thisCpusTuning();
}

// Weight bytes per thread below which splitting a matrix product costs more than it saves (a
// hand-off to a spinning worker costs about a microsecond; 32 KiB of weights take about two on one
// core). At 32 KiB the tiny shape's layers (37-99 KiB products) split too, which its decode gains
// from (docs/cpu-kernels.md, "Thread pool").
constexpr size_t kMinWeightBytesPerThread = 32 * 1024;
// The same for attention, in (position x head dim) products per thread.
constexpr int64_t kMinAttentionWorkPerThread = 16 * 1024;

// y[t][r] += bias[r] for rows [begin, end) of every token (bias may be null).
void addBias(const float* bias, float* y, int64_t rows, int64_t tokens, int64_t begin, int64_t end) {
  if (!bias) return;
  for (int64_t t = 0; t < tokens; t++) {
    for (int64_t r = begin; r < end; r++) y[t * rows + r] += bias[r];
  }
}

// CpuDeviceOptions::promptBytes unless set: on, but for JITLLM_CPU_PROMPT_BYTES=0.
bool promptBytesByDefault() {
  const char* env = std::getenv("JITLLM_CPU_PROMPT_BYTES");
  return !(env && std::strcmp(env, "0") == 0);
}

// CpuDeviceOptions::packedDecode unless set: on, but for JITLLM_CPU_PACK=0.
bool packedDecodeByDefault() {
  const char* env = std::getenv("JITLLM_CPU_PACK");
  return !(env && std::strcmp(env, "0") == 0);
}

}  // namespace

CpuDevice::CpuDevice(const CpuDeviceOptions& options)
    : isa_(options.isa.value_or(bestIsa())),
      tuning_(tuningFor(options)),
      pool_(options.threads > 0 ? options.threads : tuning_.threads),
      promptBytes_(options.promptBytes.value_or(promptBytesByDefault())),
      packedDecode_(options.packedDecode.value_or(packedDecodeByDefault())),
      packed_(
          [this](size_t bytes) {
            // A speed-up may not crowd out what replies need: the copies leave half the budget
            // to KV pages and scratch.
            if (memoryUsed() + bytes > info_.memoryBudget / 2) return false;
            try {
              reserveMemory(bytes);
              return true;
            } catch (const Error&) {
              return false;
            }
          },
          [this](size_t bytes) { releaseMemory(bytes); }) {
  info_.id = {"cpu", options.index};
  info_.caps.hostMemory = true;
  info_.caps.kernelsCompiledIn = true;
  info_.name = std::string("CPU (") + isaName(isa_) + ")";
  info_.memoryBudget = options.memoryBudget ? options.memoryBudget : physicalMemory();
  info_.threads = pool_.threads();
}

CpuDevice::~CpuDevice() = default;

std::unique_ptr<DeviceBuffer> CpuDevice::allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  reserveMemory(rounded);
  const bool mapped = rounded >= kMapThreshold;
  void* p = mapped ? ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                   : std::aligned_alloc(kBufferAlignment, rounded);
  if (p == nullptr || p == MAP_FAILED) {
    releaseMemory(rounded);
    JITLLM_FAIL(kOverloaded, info_.id.str(), ": the host could not allocate ", rounded, " bytes");
  }
  return std::make_unique<CpuBuffer>(*this, static_cast<uint8_t*>(p), rounded,
                                     mapped ? CpuBuffer::Origin::kMapped : CpuBuffer::Origin::kHeap);
}

std::unique_ptr<DeviceBuffer> CpuDevice::adoptHostBytes(const uint8_t* bytes, size_t size) {
  // The CPU reads the mapping in place: no copy, no budget (the page cache holds the bytes).
  auto buffer = std::make_unique<CpuBuffer>(*this, const_cast<uint8_t*>(bytes), size, CpuBuffer::Origin::kAdopted);
  packed_.adopted(buffer.get(), bytes, size);
  return buffer;
}

void CpuDevice::copyFromHost(uint8_t* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuDevice::copyToHost(void* dst, const uint8_t* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuDevice::copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes) {
  target.copyFromHost(dst, src, bytes);
}

void CpuDevice::getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i++) {
    JITLLM_REQUIRE(ids[i] >= 0 && ids[i] < table.rows, "token id ", ids[i], " is outside the vocabulary of ",
                   table.rows);
    quant::dequantizeRow(table.type, table.data + size_t(ids[i]) * table.rowStride, out + i * table.cols, table.cols);
  }
}

void CpuDevice::rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  pool_.parallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      // The mean of squares in double: cheap at this size and it removes the one reduction whose
      // rounding would otherwise depend on the vector width.
      double sum = 0;
      for (int64_t i = 0; i < dim; i++) sum += double(xr[i]) * double(xr[i]);
      const float scale = float(1.0 / std::sqrt(sum / double(dim) + double(eps)));
      for (int64_t i = 0; i < dim; i++) o[i] = xr[i] * scale * weight[i];
    }
  });
}

bool CpuDevice::streamsFromMemory(const WeightRef& w) {
  // Above tuning_.cacheResidentBytes the weights of a step are not all in the caches when the
  // step comes round again (by default 64 MiB: the tiny test model, 15 MB, stays; the 1B shape,
  // 807 MB, streams). Decode speed only.
  // Matrices of models unloaded long ago would only inflate the sum: start over now and then.
  constexpr size_t kRememberedMatrices = 4096;
  const size_t bytes = size_t(w.rows) * w.rowStride;
  if (weightBytes_.size() >= kRememberedMatrices) {
    weightBytes_.clear();
    weightBytesTotal_ = 0;
  }
  auto [it, added] = weightBytes_.try_emplace(w.data, bytes);
  if (!added && it->second != bytes) {
    weightBytesTotal_ -= it->second;
    it->second = bytes;
    added = true;
  }
  if (added) weightBytesTotal_ += bytes;
  return weightBytesTotal_ > tuning_.cacheResidentBytes;
}

void CpuDevice::matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) {
  if (!PreparedActivations::wanted(isa_, w.type, tokens)) {
    const MatmulTarget target{w, y, bias};
    multiply(std::span(&target, 1), x, tokens);
    return;
  }
  // Prefill on AMX: the activations are laid out once (tiles of tokens split among the threads),
  // then the threads take whole row tiles.
  const WeightView view = viewFor(w, tokens);
  const int64_t tiles = prepared_.reset(tokens, w.cols);
  pool_.parallelFor(tiles, 1, [&](int64_t begin, int64_t end) { prepared_.layOut(x, w.cols, begin, end); });
  constexpr int64_t kGrain = PreparedActivations::kRowGrain;
  const int64_t rowTiles = (w.rows + kGrain - 1) / kGrain;
  pool_.parallelFor(rowTiles, 1, [&](int64_t begin, int64_t end) {
    const int64_t rowBegin = begin * kGrain, rowEnd = std::min(w.rows, end * kGrain);
    matmulRowsPrepared(view, prepared_, y, w.rows, rowBegin, rowEnd, isa_);
    addBias(bias, y, w.rows, tokens, rowBegin, rowEnd);
  });
}

void CpuDevice::matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) {
  for (const MatmulTarget& t : targets) {
    if (PreparedActivations::wanted(isa_, t.w.type, tokens)) return Device::matmuls(targets, x, tokens);
  }
  multiply(targets, x, tokens);
}

WeightView CpuDevice::viewFor(const WeightRef& w, int64_t tokens) {
  WeightView view{w.type, w.data, w.rows, w.cols, w.rowStride};
  view.streamed = streamsFromMemory(w);
  view.prefillChunk = tuning_.prefillChunk;
  view.prefetchBytes = tuning_.prefetchBytes;
  view.narrowInt8 = runsNarrow(tuning_, w.type, tokens);
  view.packed = packedCopy(view);
  return view;
}

const uint8_t* CpuDevice::packedCopy(const WeightView& w) {
  if (!packedDecode_ || !packedDecode(isa_, w.type)) return nullptr;
  return packed_.copyOf(w, [&](uint8_t* out) {
    pool_.parallelFor(w.rows / kPackedRows, 1, [&](int64_t begin, int64_t end) { packRows(w, begin, end, out); });
  });
}

size_t CpuDevice::prepareKernels(const KernelWorkload& workload) {
  for (const std::vector<WeightRef>& product : workload.products) {
    for (const WeightRef& w : product) packedCopy(WeightView{w.type, w.data, w.rows, w.cols, w.rowStride});
  }
  return 0;
}

void CpuDevice::multiply(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) {
  if (targets.empty()) return;
  const int64_t cols = targets[0].w.cols;
  // The targets' rows one after another, split among the threads as one loop; each row's result
  // depends only on its kernel, so neither the thread count nor the grouping changes an output.
  std::vector<WeightView> views;
  int64_t rows = 0;
  size_t bytes = 0;
  // x cannot change during this call: each thread may quantize its few tokens once for all the
  // targets' rows it takes (WeightView::inputEpoch; unique in the process, so another device's
  // call on the same thread never matches).
  static std::atomic<uint64_t> lastEpoch{0};
  const uint64_t epoch = lastEpoch.fetch_add(1, std::memory_order_relaxed) + 1;
  for (const MatmulTarget& t : targets) {
    JITLLM_REQUIRE(t.w.cols == cols, "matmuls: products of one input need one column count, not ", cols, " and ",
                   t.w.cols);
    views.push_back(viewFor(t.w, tokens));
    views.back().inputEpoch = epoch;
    rows += t.w.rows;
    bytes += size_t(t.w.rows) * t.w.rowStride;
  }
  if (rows == 0 || tokens == 0) return;
  // The prompt rows' runs on their own path for the matrices that have it, the others' on the
  // ordinary one. Each run's prompt activations are laid out once, by all threads, before any row
  // is multiplied, and serve every matrix (in every chunk of rows, matmulPromptRows would quantize
  // them again).
  struct Run {
    int64_t begin, end;
    bool prompt;
  };
  std::vector<Run> runs;
  bool anyPrompt = false;
  if (promptBytes_ && promptRows_.in(tokens)) {
    for (const MatmulTarget& t : targets) anyPrompt = anyPrompt || promptRowsOnBytes(isa_, t.w.type);
  }
  if (anyPrompt) {
    promptRows_.forEachRun(tokens, [&](int64_t begin, int64_t end, bool prompt) {
      runs.push_back({begin, end, prompt});
    });
  } else {
    runs.push_back({0, tokens, false});
  }
  while (promptActivations_.size() < runs.size()) promptActivations_.push_back(std::make_unique<PromptActivations>());
  for (size_t i = 0; i < runs.size(); i++) {
    if (!runs[i].prompt) continue;
    PromptActivations& p = *promptActivations_[i];
    const int64_t groups = p.reset(isa_, runs[i].end - runs[i].begin, cols);
    pool_.parallelFor(groups, 1,
                      [&](int64_t begin, int64_t end) { p.layOut(x + runs[i].begin * cols, cols, begin, end); });
  }
  const int64_t bytesPerRow = int64_t(std::max<size_t>(1, bytes / size_t(rows)));
  const int64_t minRows = int64_t(kMinWeightBytesPerThread) / std::max<int64_t>(1, bytesPerRow * tokens);
  pool_.parallelFor(rows, std::max<int64_t>(minRows, 4), [&](int64_t begin, int64_t end) {
    int64_t first = 0;  // the target's first row in the loop's numbering
    for (size_t m = 0; m < targets.size(); first += targets[m].w.rows, m++) {
      const MatmulTarget& t = targets[m];
      const int64_t rowBegin = std::max(begin, first) - first;
      const int64_t rowEnd = std::min(end, first + t.w.rows) - first;
      if (rowBegin >= rowEnd) continue;
      if (anyPrompt && promptRowsOnBytes(isa_, t.w.type)) {
        for (size_t i = 0; i < runs.size(); i++) {
          float* ys = t.y + runs[i].begin * t.w.rows;
          if (runs[i].prompt) {
            matmulPromptRowsPrepared(views[m], *promptActivations_[i], ys, t.w.rows, rowBegin, rowEnd);
          } else {
            matmulRows(views[m], x + runs[i].begin * cols, cols, runs[i].end - runs[i].begin, ys, t.w.rows, rowBegin,
                       rowEnd, isa_);
          }
        }
      } else {
        // No prompt path for this matrix: all tokens at once, as matmul() takes them.
        matmulRows(views[m], x, cols, tokens, t.y, t.w.rows, rowBegin, rowEnd, isa_);
      }
      addBias(t.bias, t.y, t.w.rows, tokens, rowBegin, rowEnd);
    }
  });
}

void CpuDevice::setPromptRows(std::span<const RowRange> ranges, int64_t tokens) {
  promptRows_.set(ranges, tokens, info_.id);
}

void CpuDevice::rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
                     const RopeParams& params) {
  const int half = params.rotaryDims / 2;
  JITLLM_REQUIRE(params.rotaryDims > 0 && params.rotaryDims <= headDim && params.rotaryDims % 2 == 0,
                 "rope: rotary dims ", params.rotaryDims, " do not fit head dim ", headDim);
  const size_t n = size_t(tokens);
  const auto matches = [&](const RopeAngles& a) {
    return a.rotaryDims == params.rotaryDims && a.freqBase == params.freqBase && a.freqScale == params.freqScale &&
           a.attnFactor == params.attnFactor && a.factors.size() == (params.freqFactors ? size_t(half) : 0) &&
           (params.freqFactors == nullptr ||
            std::memcmp(a.factors.data(), params.freqFactors, size_t(half) * sizeof(float)) == 0) &&
           a.positions.size() == n && std::memcmp(a.positions.data(), positions, n * sizeof(int32_t)) == 0;
  };
  // The entry used now goes first; a miss replaces the older one.
  if (!matches(ropeAngles_[0])) std::swap(ropeAngles_[0], ropeAngles_[1]);
  RopeAngles& a = ropeAngles_[0];
  if (!matches(a)) {
    a.rotaryDims = params.rotaryDims;
    a.freqBase = params.freqBase;
    a.freqScale = params.freqScale;
    a.attnFactor = params.attnFactor;
    a.factors.assign(params.freqFactors, params.freqFactors ? params.freqFactors + half : params.freqFactors);
    a.positions.assign(positions, positions + n);
    a.cos.resize(n * size_t(half));
    a.sin.resize(n * size_t(half));
    // Angles in double: the float64 reference computes them so, and float32 powers drift by
    // several ulps at large positions.
    std::vector<double> inv(static_cast<size_t>(half));
    for (int i = 0; i < half; i++) {
      inv[size_t(i)] = std::pow(double(params.freqBase), -2.0 * i / double(params.rotaryDims));
      if (params.freqFactors) inv[size_t(i)] /= double(params.freqFactors[i]);
    }
    pool_.parallelFor(tokens, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; t++) {
        const double pos = double(positions[t]) * double(params.freqScale);
        for (int i = 0; i < half; i++) {
          a.cos[size_t(t * half + i)] = float(std::cos(pos * inv[size_t(i)])) * params.attnFactor;
          a.sin[size_t(t * half + i)] = float(std::sin(pos * inv[size_t(i)])) * params.attnFactor;
        }
      }
    });
  }
  pool_.parallelFor(tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; t++) {
      const float* cosv = a.cos.data() + t * half;
      const float* sinv = a.sin.data() + t * half;
      for (int h = 0; h < heads; h++) {
        float* v = x + (t * heads + h) * headDim;
        for (int i = 0; i < half; i++) {
          const int p = params.neox ? i : 2 * i;
          const int q = params.neox ? i + half : 2 * i + 1;
          const float x0 = v[p], x1 = v[q];
          v[p] = x0 * cosv[i] - x1 * sinv[i];
          v[q] = x0 * sinv[i] + x1 * cosv[i];
        }
      }
    }
  });
}

void CpuDevice::kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) {
  const int64_t width = int64_t(layout.kvHeads) * layout.headDim;
  for (int64_t t = 0; t < tokens; t++) {
    uint8_t* kDst = slots[t].page + size_t(slots[t].slot) * layout.tokenBytes();
    uint8_t* vDst = slots[t].page + size_t(layout.pageTokens + slots[t].slot) * layout.tokenBytes();
    if (layout.precision == KvPrecision::kF16) {
      quant::fp32ToFp16Row(k + t * width, reinterpret_cast<uint16_t*>(kDst), width);
      quant::fp32ToFp16Row(v + t * width, reinterpret_cast<uint16_t*>(vDst), width);
    } else {
      std::memcpy(kDst, k + t * width, size_t(width) * sizeof(float));
      std::memcpy(vDst, v + t * width, size_t(width) * sizeof(float));
    }
  }
}

void CpuDevice::attention(const float* q, float* out, const AttentionBatch& batch) {
  const int64_t pairs = batch.tokens * batch.heads;
  // Split only when each thread gets enough positions x dims to outweigh the hand-off.
  int64_t work = 0;
  for (int64_t t = 0; t < batch.tokens; t++) {
    const int64_t seen = int64_t(batch.positions[t]) + 1;
    work += batch.window > 0 ? std::min<int64_t>(seen, batch.window) : seen;
  }
  work *= int64_t(batch.heads) * batch.kv.headDim;
  const int64_t minPairs = std::max<int64_t>(1, pairs * kMinAttentionWorkPerThread / std::max<int64_t>(1, work));
  pool_.parallelFor(pairs, minPairs, [&](int64_t begin, int64_t end) {
    AttentionScratch scratch;
    const int group = batch.heads / batch.kv.kvHeads;
    for (int64_t i = begin; i < end;) {  // the heads of one KV head together (the range may split them)
      const int head = int(i % batch.heads);
      const int count = int(std::min<int64_t>({end - i, group - head % group, kMaxHeadsAtOnce}));
      attendHeads(q, out, batch, i / batch.heads, head, count, isa_, scratch);
      i += count;
    }
  });
}

void CpuDevice::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  pool_.parallelFor(n, 4096, [&](int64_t begin, int64_t end) { swigluRange(gate, up, out, begin, end, isa_); });
}

void CpuDevice::geglu(const float* gate, const float* up, float* out, int64_t n) {
  pool_.parallelFor(n, 4096, [&](int64_t begin, int64_t end) { gegluRange(gate, up, out, begin, end, isa_); });
}

void CpuDevice::add(float* x, const float* y, int64_t n) {
  pool_.parallelFor(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) x[i] += y[i];
  });
}

void CpuDevice::scale(float* x, float s, int64_t n) {
  pool_.parallelFor(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) x[i] *= s;
  });
}

void CpuDevice::softcap(float* x, float cap, int64_t n) {
  pool_.parallelFor(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) x[i] = cap * std::tanh(x[i] / cap);
  });
}

void CpuDevice::selectCandidates(float* logits, int64_t rows, int64_t vocab, std::span<const CandidateRequest> requests,
                                 int32_t* ids, float* values, int64_t stride) {
  JITLLM_REQUIRE(int64_t(requests.size()) == rows, "selectCandidates: ", requests.size(), " requests for ", rows,
                 " rows");
  for (const CandidateRequest& r : requests) {
    JITLLM_REQUIRE(r.count >= 1 && r.count <= stride, "selectCandidates: a row asks for ", r.count,
                   " candidates, room for ", stride);
  }
  pool_.parallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
      jitllm::selectCandidates(logits + r * vocab, vocab, requests[size_t(r)], ids + r * stride, values + r * stride);
    }
  });
}

}  // namespace jitllm::cpu
