#include "kernels/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/candidates.h"

namespace jitllm::cuda {

// Free memory kept out of the budget for what the driver and our kernels need outside it
// (modules, the context's own allocations, staging).
static constexpr size_t kReserveMin = size_t(512) << 20;

namespace {

// What rope kernels read, staged: the inverse frequencies (double, as the CPU computes them), then
// the positions; ropeBytes rounds up to 8 so more can follow.
size_t ropeBytes(const RopeParams& params, int64_t tokens) {
  return roundUp(size_t(params.rotaryDims / 2) * sizeof(double) + size_t(tokens) * sizeof(int32_t), 8);
}

void writeRope(uint8_t* at, const RopeParams& params, const int32_t* positions, int64_t tokens) {
  const int half = params.rotaryDims / 2;
  // Inverse frequencies in double exactly as the CPU computes them; positions after them.
  auto* inv = reinterpret_cast<double*>(at);
  for (int i = 0; i < half; i++) {
    double v = std::pow(double(params.freqBase), -2.0 * i / double(params.rotaryDims));
    if (params.freqFactors) v /= double(params.freqFactors[i]);
    inv[i] = v;
  }
  std::memcpy(at + size_t(half) * sizeof(double), positions, size_t(tokens) * sizeof(int32_t));
}

// What kv_store reads: each token's page address, then its slot.
size_t kvSlotBytes(int64_t tokens) { return size_t(tokens) * (sizeof(uint64_t) + sizeof(int32_t)); }

}  // namespace

int CudaDevice::count() {
  const DriverApi* api = driverApi();
  if (api == nullptr) return 0;
  int n = 0;
  if (api->cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n;
}

std::string CudaDevice::unavailableReason() {
  if (driverApi() == nullptr) return driverUnavailableReason();
  if (count() == 0) return "the NVIDIA driver reports no GPU";
  return {};
}

std::unique_ptr<CudaDevice> CudaDevice::create(const CudaDeviceOptions& options) {
  const DriverApi* api = driverApi();
  if (api == nullptr) {
    JITLLM_FAIL(kUnimplemented, "cuda:", options.index, ": no CUDA devices: ", driverUnavailableReason());
  }
  const int n = count();
  if (options.index < 0 || options.index >= n) {
    JITLLM_FAIL(kUnimplemented, "cuda:", options.index, ": this machine has ", n, " CUDA device", n == 1 ? "" : "s");
  }
  // Bad settings fail here, not halfway through the constructor (which would leave what it made).
  return std::unique_ptr<CudaDevice>(new CudaDevice(*api, options, resolveSettings(options.settings)));
}

CudaDevice::CudaDevice(const DriverApi& api, const CudaDeviceOptions& options, const ResolvedCudaSettings& settings)
    : ctx_(api, options.index),
      profiler_(ctx_, settings.profile, settings.timeGraphs),
      kernels_(ctx_, options.cacheRoot.value_or(KernelCache::defaultRoot()), settings.defines, settings.attentionSpan),
      queue_(ctx_, profiler_, settings),
      memory_(ctx_, queue_, profiler_, budget_),
      prompt_(ctx_, memory_, queue_, kernels_, settings),
      matmul_(ctx_, memory_, queue_, kernels_, prompt_, settings),
      attention_(ctx_, memory_, queue_, kernels_, settings),
      blocks_(ctx_, memory_, queue_, kernels_, settings),
      fuse_(settings.fuse) {
  info_.id = {"cuda", options.index};
  info_.threads = 0;
  char name[256] = {};
  ctx_.check(api.cuDeviceGetName(name, sizeof name, ctx_.device), "cuDeviceGetName");
  CUuuid uuid{};
  ctx_.check(api.cuDeviceGetUuid(&uuid, ctx_.device), "cuDeviceGetUuid");
  info_.uuid = formatUuid(reinterpret_cast<const uint8_t*>(uuid.bytes));
  info_.name = std::string(name) + " (sm_" + std::to_string(ctx_.arch) + ", " + std::to_string(ctx_.multiprocessors) +
               " SMs, NVRTC kernels)";
  size_t freeBytes = 0, totalBytes = 0;
  ctx_.check(api.cuMemGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
  const size_t reserve = std::max(kReserveMin, totalBytes / 20);
  info_.memoryBudget = options.memoryBudget ? options.memoryBudget : (freeBytes > reserve ? freeBytes - reserve : 0);
}

CudaStats CudaDevice::stats() const {
  CudaStats s;
  s.graphLaunches = queue_.graphLaunches();
  s.graphsCaptured = queue_.graphsCaptured();
  s.earlySubmits = queue_.earlySubmits();
  s.separateQuantizations = matmul_.separateQuantizations();
  s.fusedQuantizations = matmul_.fusedQuantizations();
  s.fusedAdds = fusedAdds_;
  s.groupedProducts = matmul_.groupedProducts();
  s.tensorCoreProducts = matmul_.tensorCoreProducts();
  s.promptProducts = prompt_.products();
  s.perHeadAttentions = attention_.perHeadAttentions();
  s.rowAttentions = attention_.rowAttentions();
  s.peerBlockMoves = blocks_.peerBlockMoves();
  s.modulesPrepared = kernels_.stats().modulesPrepared;
  s.modulesCompiled = kernels_.stats().modulesCompiled;
  s.modulesMadeOnUse = kernels_.stats().modulesMadeOnUse;
  s.prepareSeconds = kernels_.stats().prepareSeconds;
  return s;
}

CudaDevice::~CudaDevice() {
  profiler_.report();
  // What is queued runs, and then nothing does: the parts give back what they hold as they go,
  // in the reverse of the order they were made, the context last.
  ctx_.makeCurrent();
  try {
    queue_.flush();
  } catch (const Error&) {
  }
  queue_.dropGraphs();
  if (ctx_.stream) ctx_.api.cuStreamSynchronize(ctx_.stream);
}

bool CudaDevice::responsive() {
  // After a GPU falls off the bus or its context hits a sticky error, every call fails.
  size_t free = 0, total = 0;
  return ctx_.api.cuCtxSetCurrent(ctx_.context) == CUDA_SUCCESS && ctx_.api.cuMemGetInfo(&free, &total) == CUDA_SUCCESS;
}

void CudaDevice::synchronize() {
  queue_.drain();
  if (profiler_.any()) profiler_.collect();
}

// ---- memory and copies ----

std::unique_ptr<HostBuffer> CudaDevice::allocateStreamSource(size_t bytes) {
  return memory_.allocateStreamSource(bytes);
}

uint64_t CudaDevice::markOps() { return memory_.markOps(); }

uint64_t CudaDevice::uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t afterMark) {
  return memory_.uploadAsync(dst, src, bytes, afterMark);
}

void CudaDevice::waitForUpload(uint64_t upload) { memory_.waitForUpload(upload); }

std::unique_ptr<DeviceBuffer> CudaDevice::allocate(size_t bytes) { return memory_.allocate(bytes, *this); }

std::unique_ptr<DeviceBuffer> CudaDevice::adoptHostBytes(const uint8_t* bytes, size_t size) {
  auto buffer = allocate(size);
  copyFromHost(buffer->data(), bytes, size);
  return buffer;
}

void CudaDevice::copyFromHost(uint8_t* dst, const void* src, size_t bytes) { memory_.copyFromHost(dst, src, bytes); }

void CudaDevice::copyToHost(void* dst, const uint8_t* src, size_t bytes) { memory_.copyToHost(dst, src, bytes); }

void CudaDevice::gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes) {
  if (count == 0 || blockBytes == 0) return;
  if (!blocks_.on()) {
    Device::gatherToHost(dst, blocks, count, blockBytes);
    return;
  }
  blocks_.gatherToHost(dst, blocks, count, blockBytes);
}

void CudaDevice::scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes) {
  if (count == 0 || blockBytes == 0) return;
  if (!blocks_.on()) {
    Device::scatterFromHost(blocks, src, count, blockBytes);
    return;
  }
  blocks_.scatterFromHost(blocks, src, count, blockBytes);
}

bool CudaDevice::moveBlocksTo(Device& target, const uint8_t* const* from, uint8_t* const* to, size_t count,
                              size_t blockBytes) {
  auto* peer = dynamic_cast<CudaDevice*>(&target);
  if (peer == nullptr || !blocks_.on() || !peer->blocks_.on()) return false;
  if (count == 0 || blockBytes == 0) return true;
  blocks_.moveBlocksTo(peer->blocks_, from, to, count, blockBytes);
  return true;
}

void CudaDevice::copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes) {
  auto* peer = dynamic_cast<CudaDevice*>(&target);
  if (peer == nullptr) {
    Device::copyToDevice(target, dst, src, bytes);
    return;
  }
  if (bytes == 0) return;
  blocks_.copyToDevice(peer->blocks_, dst, src, bytes);
}

void CudaDevice::selectCandidates(float* logits, int64_t rows, int64_t vocab,
                                  std::span<const CandidateRequest> requests, int32_t* ids, float* values,
                                  int64_t stride) {
  JITLLM_REQUIRE(int64_t(requests.size()) == rows, "selectCandidates: ", requests.size(), " requests for ", rows,
                 " rows");
  if (rows == 0) return;
  JITLLM_REQUIRE(vocab > 0 && vocab < (int64_t(1) << 31) && stride > 0 && stride <= (int64_t(1) << 20), info_.id,
                 ": selectCandidates: bad shape");
  memory_.requireOwned(logits, size_t(rows * vocab) * sizeof(float), "logits");
  // One staged table of the requests (kernels/candidates.h).
  const CandidateTable t = planCandidateTable(requests, stride, kMaxSelectCandidates, info_.id.str());
  const CudaOpQueue::Staged s = queue_.stage(t.bytes());
  packCandidateTable(requests, t, s.host);
  queue_.commit(s);
  const size_t out = size_t(rows) * size_t(stride) * 4;
  memory_.grow(candidates_, 2 * out, "sampling candidates");
  const CUfunction f = kernels_.selectCandidates();
  const CUdeviceptr countsPtr = s.device, startsPtr = s.device + t.startsOffset(), idsPtr = s.device + t.idsOffset(),
                    penaltiesPtr = s.device + t.penaltiesOffset(), outIds = candidates_.ptr(),
                    outValues = candidates_.ptr() + out;
  const CUdeviceptr rowsPtr = dptr(logits);
  const int64_t v = vocab;
  const int s32 = int(stride);
  queue_.launch("selectCandidates", f, unsigned(rows), 1, kSelectThreads, 0, rowsPtr, v, countsPtr, startsPtr, idsPtr,
                penaltiesPtr, outIds, outValues, s32);
  // Ids and values side by side: one read-back, which also ends the step (the ring starts over,
  // so the next step's queue matches this one's graph - two plain downloads left the ring where
  // it was, and every serving step ran launch by launch).
  candidatesHost_.resize(2 * out);
  memory_.readBack(candidatesHost_.data(), outIds, 2 * out);
  std::memcpy(ids, candidatesHost_.data(), out);
  std::memcpy(values, candidatesHost_.data() + out, out);
}

// ---- ops ----

void CudaDevice::getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) {
  queue_.setOpTokens(n);
  if (n == 0) return;
  JITLLM_REQUIRE(cudaSupportsWeightType(table.type), info_.id, ": getRows: weight type ", quant::typeName(table.type),
                 " is not supported");
  for (int64_t i = 0; i < n; i++) {
    JITLLM_REQUIRE(ids[i] >= 0 && ids[i] < table.rows, "token id ", ids[i], " is outside the vocabulary of ",
                   table.rows);
  }
  JITLLM_REQUIRE(
      table.cols % quant::typeTraits(table.type).blockElems == 0 && table.cols < (int64_t(1) << 30) && n < 65536,
      info_.id, ": getRows: bad shape");
  memory_.requireOwned(table.data, table.rowStride * size_t(table.rows - 1) + *quant::rowBytes(table.type, table.cols),
                       "embedding table");
  memory_.requireOwned(out, size_t(n * table.cols) * sizeof(float), "getRows output");
  ctx_.makeCurrent();
  const int align = commonAlignment(reinterpret_cast<uintptr_t>(table.data), table.rowStride);
  JITLLM_REQUIRE(align >= 2, info_.id, ": weight rows must be 2-byte aligned");
  CUfunction f = kernels_.matmul(table.type, table.cols, align, table.cols % 4 == 0, 0);
  const CudaOpQueue::Staged s = queue_.stage(size_t(n) * sizeof(int32_t));
  std::memcpy(s.host, ids, size_t(n) * sizeof(int32_t));
  queue_.commit(s);
  CUdeviceptr tablePtr = dptr(table.data), idsPtr = s.device, outPtr = dptr(out);
  uint64_t stride = table.rowStride;
  const unsigned chunks = unsigned(std::min<int64_t>((table.cols + 2047) / 2048, 64));
  queue_.launch("getRows", f, chunks, unsigned(n), 256, 0, tablePtr, stride, idsPtr, outPtr);
}

void CudaDevice::rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  queue_.setOpTokens(rows);
  if (rows == 0) return;
  JITLLM_REQUIRE(rows < (int64_t(1) << 31) && dim > 0 && dim < (int64_t(1) << 31), info_.id, ": rmsNorm: bad shape");
  memory_.requireOwned(x, size_t(rows * dim) * 4, "rmsNorm input");
  memory_.requireOwned(weight, size_t(dim) * 4, "rmsNorm weight");
  memory_.requireOwned(out, size_t(rows * dim) * 4, "rmsNorm output");
  ctx_.makeCurrent();
  CUdeviceptr xp = dptr(x), wp = dptr(weight), op = dptr(out), addend = 0;
  int d = int(dim);
  const CUfunction f = kernels_.elementwise().rmsNorm;
  const auto make = [=](CUdeviceptr add, CUdeviceptr xq, uint64_t stride) {
    return CudaOpQueue::makeLaunch(f, unsigned(rows), 1, kNormThreads, 0, xp, wp, op, d, eps, xq, stride, add);
  };
  // x += y just queued (the residual add) is done by this kernel as it reads x: the add's launch
  // is replaced.
  FusionState& fusion = queue_.fusion();
  const QueuedAdd& lastAdd = fusion.lastAdd;
  size_t index = kNotQueued;
  if (fuse_ && lastAdd.x == x && lastAdd.elements == rows * dim &&
      queue_.replaceIfLastQueued(lastAdd.index, lastAdd.command, make(dptr(lastAdd.y), 0, 0))) {
    addend = dptr(lastAdd.y);
    index = lastAdd.index;
  }
  const Command c = make(addend, 0, 0);
  if (index != kNotQueued) {
    fusion.lastAdd = {};
    fusion.forgetHeldInputs();
    fusion.producer = {};
    fusedAdds_++;
  } else {
    index = queue_.enqueue("rmsNorm", c);
  }
  queue_.offerFusion(index, c, out, rows * dim, [=](CUdeviceptr xq, uint64_t stride, int k) -> std::optional<Command> {
    if (k != d || d % 32 != 0) return std::nullopt;
    return make(addend, xq, stride);
  });
}

void CudaDevice::matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) {
  matmul_.matmul(w, x, tokens, y, bias);
}

void CudaDevice::matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) {
  queue_.setOpTokens(tokens);
  if (!matmul_.matmulsInOneLaunch(targets, x, tokens)) Device::matmuls(targets, x, tokens);
}

void CudaDevice::setPromptRows(std::span<const RowRange> ranges, int64_t tokens) {
  prompt_.setRows(ranges, tokens, info_.id);
}

void CudaDevice::checkRope(const RopeParams& params, int headDim, int64_t tokens) const {
  JITLLM_REQUIRE(params.rotaryDims > 0 && params.rotaryDims <= headDim && params.rotaryDims % 2 == 0,
                 "rope: rotary dims ", params.rotaryDims, " do not fit head dim ", headDim);
  JITLLM_REQUIRE(tokens < (int64_t(1) << 31), info_.id, ": rope: too many tokens");
}

void CudaDevice::writeKvSlots(uint8_t* at, const KvSlot* slots, int64_t tokens, const KvLayout& layout) const {
  auto* pages = reinterpret_cast<uint64_t*>(at);
  auto* slotIdx = reinterpret_cast<int32_t*>(at + size_t(tokens) * sizeof(uint64_t));
  for (int64_t t = 0; t < tokens; t++) {
    JITLLM_REQUIRE(slots[t].slot >= 0 && slots[t].slot < layout.pageTokens, info_.id, ": kvStore: slot ", slots[t].slot,
                   " is outside a page of ", layout.pageTokens);
    pages[t] = uint64_t(reinterpret_cast<uintptr_t>(slots[t].page));
    slotIdx[t] = slots[t].slot;
  }
}

int64_t CudaDevice::checkKvStore(const float* k, const float* v, int64_t tokens, const KvLayout& layout) const {
  const int64_t width = int64_t(layout.kvHeads) * layout.headDim;
  JITLLM_REQUIRE(tokens < (int64_t(1) << 31) && width > 0 && width < (int64_t(1) << 30), info_.id,
                 ": kvStore: bad shape");
  memory_.requireOwned(k, size_t(tokens * width) * 4, "kvStore K");
  memory_.requireOwned(v, size_t(tokens * width) * 4, "kvStore V");
  return width;
}

void CudaDevice::rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
                      const RopeParams& params) {
  queue_.setOpTokens(tokens);
  checkRope(params, headDim, tokens);
  if (tokens == 0) return;
  memory_.requireOwned(x, size_t(tokens) * size_t(heads) * size_t(headDim) * 4, "rope input");
  ctx_.makeCurrent();
  const int half = params.rotaryDims / 2;
  const CudaOpQueue::Staged s = queue_.stage(ropeBytes(params, tokens));
  writeRope(s.host, params, positions, tokens);
  queue_.commit(s);
  CUdeviceptr xp = dptr(x), invPtr = s.device, posPtr = s.device + size_t(half) * sizeof(double);
  int h = heads, hd = headDim, hf = half, neox = params.neox ? 1 : 0;
  double scale = double(params.freqScale);
  float mscale = params.attnFactor;
  queue_.launch("rope", kernels_.elementwise().rope, unsigned(tokens), 1, 128, size_t(2 * half) * sizeof(float), xp, h,
                hd, posPtr, invPtr, hf, scale, neox, mscale);
}

void CudaDevice::kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) {
  queue_.setOpTokens(tokens);
  if (tokens == 0) return;
  const int64_t width = checkKvStore(k, v, tokens, layout);
  ctx_.makeCurrent();
  const CudaOpQueue::Staged s = queue_.stage(kvSlotBytes(tokens));
  writeKvSlots(s.host, slots, tokens, layout);
  queue_.commit(s);
  CUdeviceptr kp = dptr(k), vp = dptr(v), pagesPtr = s.device, slotsPtr = s.device + size_t(tokens) * sizeof(uint64_t);
  int wd = int(width), pt = layout.pageTokens, f16 = layout.precision == KvPrecision::kF16 ? 1 : 0;
  queue_.launch("kvStore", kernels_.elementwise().kvStore, unsigned(tokens), 1, 256, 0, kp, vp, pagesPtr, slotsPtr, wd,
                pt, f16);
}

void CudaDevice::ropeAndStore(float* q, float* k, const float* v, int64_t tokens, int heads, int kvHeads,
                              const int32_t* positions, const RopeParams& params, const KvSlot* slots,
                              const KvLayout& layout) {
  queue_.setOpTokens(tokens);
  if (!fuse_) {
    Device::ropeAndStore(q, k, v, tokens, heads, kvHeads, positions, params, slots, layout);
    return;
  }
  const int headDim = layout.headDim;
  checkRope(params, headDim, tokens);
  if (tokens == 0) return;
  JITLLM_REQUIRE(kvHeads == layout.kvHeads, info_.id, ": ropeAndStore: ", kvHeads, " KV heads, the layout has ",
                 layout.kvHeads);
  memory_.requireOwned(q, size_t(tokens) * size_t(heads) * size_t(headDim) * 4, "rope input");
  checkKvStore(k, v, tokens, layout);
  ctx_.makeCurrent();
  const int half = params.rotaryDims / 2;
  const size_t ropeAt = ropeBytes(params, tokens);
  const CudaOpQueue::Staged s = queue_.stage(ropeAt + kvSlotBytes(tokens));
  writeRope(s.host, params, positions, tokens);
  writeKvSlots(s.host + ropeAt, slots, tokens, layout);
  queue_.commit(s);
  CUdeviceptr qp = dptr(q), kp = dptr(k), vp = dptr(v), invPtr = s.device,
              posPtr = s.device + size_t(half) * sizeof(double), pagesPtr = s.device + ropeAt,
              slotsPtr = s.device + ropeAt + size_t(tokens) * sizeof(uint64_t);
  int h = heads, kvh = kvHeads, hd = headDim, hf = half, neox = params.neox ? 1 : 0, pt = layout.pageTokens,
      f16 = layout.precision == KvPrecision::kF16 ? 1 : 0;
  double scale = double(params.freqScale);
  float mscale = params.attnFactor;
  const int64_t items = int64_t(heads + kvHeads) * half + int64_t(kvHeads) * headDim;  // rope_store's, per token
  queue_.launch("ropeStore", kernels_.elementwise().ropeStore, unsigned(tokens), unsigned((items + 255) / 256), 256, 0,
                qp, kp, vp, h, kvh, hd, posPtr, invPtr, hf, scale, neox, mscale, pagesPtr, slotsPtr, pt, f16);
}

void CudaDevice::attention(const float* q, float* out, const AttentionBatch& batch) {
  attention_.attend(q, out, batch);
}

void CudaDevice::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n == 0) return;
  memory_.requireOwned(gate, size_t(n) * 4, "swiglu gate");
  memory_.requireOwned(up, size_t(n) * 4, "swiglu up");
  memory_.requireOwned(out, size_t(n) * 4, "swiglu output");
  ctx_.makeCurrent();
  gatedActivation("swiglu", kernels_.elementwise().swiglu, gate, up, out, n);
}

void CudaDevice::geglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n == 0) return;
  memory_.requireOwned(gate, size_t(n) * 4, "geglu gate");
  memory_.requireOwned(up, size_t(n) * 4, "geglu up");
  memory_.requireOwned(out, size_t(n) * 4, "geglu output");
  ctx_.makeCurrent();
  gatedActivation("geglu", kernels_.elementwise().geglu, gate, up, out, n);
}

void CudaDevice::gatedActivation(const char* op, CUfunction f, const float* gate, const float* up, float* out,
                                 int64_t n) {
  CUdeviceptr gp = dptr(gate), up2 = dptr(up), op2 = dptr(out);
  int64_t count = n;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(ctx_.multiprocessors) * 16);
  const Command c =
      CudaOpQueue::makeLaunch(f, unsigned(blocks), 1, 256, 0, gp, up2, op2, count, CUdeviceptr(0), uint64_t(0), 0);
  queue_.offerFusion(
      queue_.enqueue(op, c), c, out, n, [=](CUdeviceptr xq, uint64_t stride, int k) -> std::optional<Command> {
        if (k % 32 != 0 || count % k != 0) return std::nullopt;
        return CudaOpQueue::makeLaunch(f, unsigned(blocks), 1, 256, 0, gp, up2, op2, count, xq, stride, k);
      });
}

void CudaDevice::add(float* x, const float* y, int64_t n) {
  if (n == 0) return;
  memory_.requireOwned(x, size_t(n) * 4, "add destination");
  memory_.requireOwned(y, size_t(n) * 4, "add source");
  ctx_.makeCurrent();
  CUdeviceptr xp = dptr(x), yp = dptr(y);
  int64_t count = n;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(ctx_.multiprocessors) * 16);
  const Command c = CudaOpQueue::makeLaunch(kernels_.elementwise().add, unsigned(blocks), 1, 256, 0, xp, yp, count);
  const size_t index = queue_.enqueue("add", c);
  if (index != kNotQueued) queue_.fusion().lastAdd = {index, c, x, y, n};  // an rmsNorm of x next takes it over
}

void CudaDevice::scale(float* x, float s, int64_t n) {
  if (n == 0) return;
  memory_.requireOwned(x, size_t(n) * 4, "scale destination");
  ctx_.makeCurrent();
  CUdeviceptr xp = dptr(x);
  int64_t count = n;
  float factor = s;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(ctx_.multiprocessors) * 16);
  queue_.enqueue("scale",
                 CudaOpQueue::makeLaunch(kernels_.elementwise().scale, unsigned(blocks), 1, 256, 0, xp, factor, count));
}

// ---- kernels made ahead ----

size_t CudaDevice::prepareKernels(const KernelWorkload& workload) {
  const auto start = std::chrono::steady_clock::now();
  // The same choices the ops make (matmul, matmuls, getRows, attention, ...).
  std::vector<ModuleSpec> wanted;
  for (const auto& ws : workload.products) matmul_.wantModules(ws, workload.maxTokens, wanted);
  for (const WeightRef& table : workload.tables) {
    if (cudaSupportsWeightType(table.type))
      wanted.push_back(matmulModule(table.type, table.cols,
                                    commonAlignment(reinterpret_cast<uintptr_t>(table.data), table.rowStride),
                                    table.cols % 4 == 0, 0));
  }
  for (const auto& a : workload.attention) attention_.wantModules(a, workload.maxTokens, wanted);
  if (workload.elementwise || !workload.products.empty()) wanted.push_back(elementwiseModule());
  if (workload.candidates) wanted.push_back(samplingModule());
  if (blocks_.on() && !workload.attention.empty()) wanted.push_back(blocksModule());
  return kernels_.prepare(wanted, start);
}

}  // namespace jitllm::cuda
