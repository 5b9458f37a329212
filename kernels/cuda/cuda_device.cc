#include "kernels/cuda/cuda_device.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"

namespace jitllm::cuda {

// Allocations are rounded to this; cuMemAlloc aligns at least as much, so every buffer start is
// aligned for 16-byte loads.
static constexpr size_t kAllocationGranule = 256;
// Free memory kept out of the budget for what the driver and our kernels need outside it
// (modules, the context's own allocations, staging).
static constexpr size_t kReserveMin = size_t(512) << 20;
// Copies up to this size go straight from pageable memory (the driver stages them itself);
// larger ones through our pinned buffers.
static constexpr size_t kDirectCopyBytes = size_t(256) << 10;

class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(CudaDevice& device, CUdeviceptr ptr, size_t size) : device_(device), ptr_(ptr), size_(size) {}
  ~CudaBuffer() override { device_.release(ptr_, size_); }
  size_t size() const override { return size_; }
  uint8_t* data() override { return reinterpret_cast<uint8_t*>(ptr_); }
  Device& device() override { return device_; }

 private:
  CudaDevice& device_;
  CUdeviceptr ptr_;
  size_t size_;
};

namespace {

CUdeviceptr dptr(const void* p) { return CUdeviceptr(reinterpret_cast<uintptr_t>(p)); }

size_t roundUp(size_t n, size_t granule) { return (n + granule - 1) / granule * granule; }

// The largest power of two, up to 16, dividing every one of the values.
int commonAlignment(uint64_t a, uint64_t b) {
  const uint64_t both = a | b | 16;
  return int(both & (~both + 1));
}

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

CudaDevice::CudaDevice(const DriverApi& api, const CudaDeviceOptions& options, ResolvedCudaSettings settings)
    : api_(api),
      cache_(options.cacheRoot.value_or(KernelCache::defaultRoot())),
      attentionRowTokens_(settings.attentionRowTokens),
      attentionSpan_(settings.attentionSpan),
      tuningDefines_(std::move(settings.defines)) {
  info_.id = {"cuda", options.index};
  info_.threads = 0;
  check(api_.cuDeviceGet(&device_, options.index), "cuDeviceGet");
  check(api_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  makeCurrent();
  int major = 0, minor = 0;
  check(api_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_), "attribute");
  check(api_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_), "attribute");
  check(api_.cuDeviceGetAttribute(&multiprocessors_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_), "attribute");
  arch_ = major * 10 + minor;
  char name[256] = {};
  check(api_.cuDeviceGetName(name, sizeof name, device_), "cuDeviceGetName");
  CUuuid uuid{};
  check(api_.cuDeviceGetUuid(&uuid, device_), "cuDeviceGetUuid");
  info_.uuid = formatUuid(reinterpret_cast<const uint8_t*>(uuid.bytes));
  info_.name = std::string(name) + " (sm_" + std::to_string(arch_) + ", " + std::to_string(multiprocessors_) +
               " SMs, NVRTC kernels)";

  check(api_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (auto& e : ringEvents_) check(api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (auto& e : stagingEvents_) check(api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  check(api_.cuStreamCreate(&copyStream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (copies)");
  for (auto& e : markEvents_) check(api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (auto& e : uploadEvents_) check(api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  ringBytes_ = kRingBytes;
  check(api_.cuMemHostAlloc(reinterpret_cast<void**>(&ringHost_), ringBytes_, 0), "cuMemHostAlloc");
  check(api_.cuMemAlloc(&ringDevice_, ringBytes_), "cuMemAlloc (staging ring)");
  for (auto& s : staging_) {
    check(api_.cuMemHostAlloc(reinterpret_cast<void**>(&s), kStagingBytes, 0), "cuMemHostAlloc");
  }

  size_t freeBytes = 0, totalBytes = 0;
  check(api_.cuMemGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
  const size_t reserve = std::max(kReserveMin, totalBytes / 20);
  info_.memoryBudget = options.memoryBudget ? options.memoryBudget : (freeBytes > reserve ? freeBytes - reserve : 0);
  profile_ = settings.profile;
  timeGraphs_ = settings.timeGraphs;
  earlySubmitCommands_ = settings.earlySubmitCommands;
  earlySubmitGrowth_ = settings.earlySubmitGrowth;
  nextPartCommands_ = earlySubmitCommands_;
  graphsEnabled_ = settings.graphs;
  integerMatmul_ = settings.integerMatmul;
  tensorCores_ = settings.tensorCores && arch_ >= 80;
  promptGemm_ = settings.promptGemm && arch_ >= 80;
  promptBlockRowsChosen_ = settings.promptBlockRows.value_or(0);
  promptSliceK_ = settings.promptSliceK;
  tensorCoreTokens_ = settings.tensorCoreTokens.value_or(kDefaultTensorCoreTokens);
  tensorCoreTokensChosen_ = settings.tensorCoreTokens.has_value();
  tensorCoreRowWarps_ = settings.tensorCoreRowWarps;
  fuse_ = settings.fuse;
  blockKernels_ = settings.blockKernels;
  programmaticLaunch_ = settings.programmaticLaunch && arch_ >= 90 && api_.cuLaunchKernelEx != nullptr;
  splitPast_ = settings.attentionSplit;
  spanBlocks_ = std::max(0, settings.attentionSpanBlocks.value_or(2 * multiprocessors_));
  attentionPerHead_ = settings.attentionPerHead;
  check(api_.cuDeviceGetAttribute(&maxSharedOptIn_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_),
        "cuDeviceGetAttribute");
  // gemm_f16's tallest block at 64 columns a stage takes 96 KiB (every sm_80+ GPU allows 99 or
  // more); where it would not fit, 32 columns, else no prompt path.
  if (size_t(maxSharedOptIn_) < promptGemmSharedBytes(128, promptSliceK_)) promptSliceK_ = 32;
  if (size_t(maxSharedOptIn_) < promptGemmSharedBytes(128, 32)) promptGemm_ = false;
  intDecodeRows_ = settings.intDecodeRows;
  intPrefillRows_ = settings.intPrefillRows;
  skipOps_ = std::move(settings.skipOps);
}

CudaStats CudaDevice::stats() const {
  CudaStats s;
  s.graphLaunches = graphLaunches_.load();
  s.graphsCaptured = graphsCaptured_.load();
  s.earlySubmits = earlySubmits_.load();
  s.separateQuantizations = separateQuantizations_;
  s.fusedQuantizations = fusedQuantizations_;
  s.fusedAdds = fusedAdds_;
  s.groupedProducts = groupedProducts_;
  s.tensorCoreProducts = tensorCoreProducts_;
  s.promptProducts = promptProducts_;
  s.perHeadAttentions = perHeadAttentions_;
  s.rowAttentions = rowAttentions_;
  s.peerBlockMoves = peerBlockMoves_;
  s.modulesPrepared = modulesPrepared_;
  s.modulesCompiled = modulesCompiled_;
  s.modulesMadeOnUse = modulesMadeOnUse_;
  s.prepareSeconds = prepareSeconds_;
  return s;
}

CudaDevice::~CudaDevice() {
  if (profile_ || timeGraphs_) {
    double total = 0;
    for (const auto& [op, t] : profileTimes_) total += t.seconds;
    std::fprintf(stderr, "%s kernel time by op (GPU time between events around each launch):\n",
                 info_.id.str().c_str());
    for (const auto& [op, t] : profileTimes_) {
      std::fprintf(stderr, "  %-28s %8lld calls %10.3f ms %8.2f us/call %5.1f%%\n", op.c_str(), (long long)t.calls,
                   t.seconds * 1e3, t.seconds * 1e6 / double(t.calls), 100.0 * t.seconds / total);
    }
  }
  if (timeGraphs_ && hostTimes_.reads > 0) {
    const double reads = double(hostTimes_.reads), builds = double(std::max<int64_t>(hostTimes_.builds, 1));
    std::fprintf(stderr,
                 "%s host per read-back (%lld): its flush %.2f us, waiting for the GPU %.2f us, the copy %.2f us; "
                 "from a read-back to the next flush (%lld): %.2f us\n",
                 info_.id.str().c_str(), (long long)hostTimes_.reads, hostTimes_.flush * 1e6 / reads,
                 hostTimes_.waitGpu * 1e6 / reads, hostTimes_.copy * 1e6 / reads, (long long)hostTimes_.builds,
                 hostTimes_.build * 1e6 / builds);
  }
  makeCurrent();
  try {
    flush();
  } catch (const Error&) {
  }
  dropGraphs();
  for (const Profiled& p : profiled_) {
    api_.cuEventDestroy(p.start);
    api_.cuEventDestroy(p.end);
  }
  for (CUevent e : eventPool_) api_.cuEventDestroy(e);
  if (stream_) api_.cuStreamSynchronize(stream_);
  for (auto& [key, m] : modules_) api_.cuModuleUnload(m);
  if (ringDevice_) api_.cuMemFree(ringDevice_);
  if (xq_) api_.cuMemFree(xq_);
  if (halfWeights_) api_.cuMemFree(halfWeights_);
  if (halfInput_) api_.cuMemFree(halfInput_);
  if (candidates_) api_.cuMemFree(candidates_);
  if (partials_) api_.cuMemFree(partials_);
  if (chunkCounters_) api_.cuMemFree(chunkCounters_);
  if (blockBuffer_) api_.cuMemFree(blockBuffer_);
  if (ringHost_) api_.cuMemFreeHost(ringHost_);
  for (auto* s : staging_) {
    if (s) api_.cuMemFreeHost(s);
  }
  for (auto e : ringEvents_) {
    if (e) api_.cuEventDestroy(e);
  }
  for (auto e : stagingEvents_) {
    if (e) api_.cuEventDestroy(e);
  }
  if (copyStream_) api_.cuStreamSynchronize(copyStream_);
  for (auto e : markEvents_) {
    if (e) api_.cuEventDestroy(e);
  }
  for (auto e : uploadEvents_) {
    if (e) api_.cuEventDestroy(e);
  }
  if (copyStream_) api_.cuStreamDestroy(copyStream_);
  if (stream_) api_.cuStreamDestroy(stream_);
  if (context_) api_.cuDevicePrimaryCtxRelease(device_);
}

void CudaDevice::check(CUresult r, const char* what) const { cuda::check(api_, r, what, info_.id.str()); }

void CudaDevice::makeCurrent() const { check(api_.cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

bool CudaDevice::responsive() {
  // After a GPU falls off the bus or its context hits a sticky error, every call fails.
  size_t free = 0, total = 0;
  return api_.cuCtxSetCurrent(context_) == CUDA_SUCCESS && api_.cuMemGetInfo(&free, &total) == CUDA_SUCCESS;
}

namespace {

class PinnedHostBuffer final : public HostBuffer {
 public:
  PinnedHostBuffer(const DriverApi& api, uint8_t* p, size_t bytes) : api_(api), p_(p), size_(bytes) {}
  ~PinnedHostBuffer() override { api_.cuMemFreeHost(p_); }
  uint8_t* data() override { return p_; }
  size_t size() const override { return size_; }

 private:
  const DriverApi& api_;
  uint8_t* p_;
  size_t size_;
};

}  // namespace

std::unique_ptr<HostBuffer> CudaDevice::allocateStreamSource(size_t bytes) {
  makeCurrent();
  void* p = nullptr;
  check(api_.cuMemHostAlloc(&p, std::max<size_t>(bytes, 1), 0), "cuMemHostAlloc (stream source)");
  return std::make_unique<PinnedHostBuffer>(api_, static_cast<uint8_t*>(p), bytes);
}

uint64_t CudaDevice::markOps() {
  flush();  // the mark comes after every op queued so far
  makeCurrent();
  const uint64_t ticket = ++marks_;
  check(api_.cuEventRecord(markEvents_[(ticket - 1) % kStreamEvents], stream_), "cuEventRecord (mark)");
  return ticket;
}

uint64_t CudaDevice::uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t afterMark) {
  requireOwned(dst, bytes, "upload destination");
  makeCurrent();
  if (afterMark != 0) {
    check(api_.cuStreamWaitEvent(copyStream_, markEvents_[(afterMark - 1) % kStreamEvents], 0), "cuStreamWaitEvent");
  }
  check(api_.cuMemcpyHtoDAsync(dptr(dst), src, bytes, copyStream_), "cuMemcpyHtoDAsync (stream)");
  const uint64_t ticket = ++uploads_;
  check(api_.cuEventRecord(uploadEvents_[(ticket - 1) % kStreamEvents], copyStream_), "cuEventRecord (upload)");
  return ticket;
}

void CudaDevice::waitForUpload(uint64_t upload) {
  if (upload == 0) return;
  flush();
  makeCurrent();
  check(api_.cuStreamWaitEvent(stream_, uploadEvents_[(upload - 1) % kStreamEvents], 0), "cuStreamWaitEvent");
}

void CudaDevice::synchronize() {
  flush();
  makeCurrent();
  check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  if (profile_ || timeGraphs_) collectProfile();
}

// ---- memory ----

std::unique_ptr<DeviceBuffer> CudaDevice::allocate(size_t bytes) {
  const size_t rounded = roundUp(std::max<size_t>(bytes, 1), kAllocationGranule);
  reserveMemory(rounded);
  makeCurrent();
  CUdeviceptr ptr = 0;
  const CUresult r = api_.cuMemAlloc(&ptr, rounded);
  if (r != CUDA_SUCCESS) {
    releaseMemory(rounded);
    check(r, "cuMemAlloc");  // OUT_OF_MEMORY becomes OVERLOADED
  }
  {
    std::lock_guard lock(allocationsMutex_);
    allocations_[uintptr_t(ptr)] = rounded;
  }
  return std::make_unique<CudaBuffer>(*this, ptr, rounded);
}

void CudaDevice::release(CUdeviceptr ptr, size_t bytes) {
  {
    std::lock_guard lock(allocationsMutex_);
    allocations_.erase(uintptr_t(ptr));
  }
  // Kernels queued earlier may still read the memory: submit and wait for them (frees are rare -
  // a workspace growing, a session's KV chunk, a unit moving away). A graph may hold the address
  // too: graphs go with it.
  try {
    flush();
  } catch (const Error&) {
    // A dead device: nothing will run any more; the memory goes below all the same.
  }
  dropGraphs();
  if (api_.cuCtxSetCurrent(context_) == CUDA_SUCCESS) {
    api_.cuStreamSynchronize(stream_);
    api_.cuMemFree(ptr);
  }
  releaseMemory(bytes);
}

void CudaDevice::requireOwned(const void* p, size_t bytes, const char* what) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(allocationsMutex_);
  auto it = allocations_.upper_bound(a);
  bool ok = it != allocations_.begin();
  if (ok) {
    --it;
    ok = a >= it->first && bytes <= it->second && a - it->first <= it->second - bytes;
  }
  JITLLM_REQUIRE(ok, info_.id, ": ", what, " (", bytes, " bytes at ", p, ") is not memory of this device");
}

std::unique_ptr<DeviceBuffer> CudaDevice::adoptHostBytes(const uint8_t* bytes, size_t size) {
  auto buffer = allocate(size);
  copyFromHost(buffer->data(), bytes, size);
  return buffer;
}

void CudaDevice::copyFromHost(uint8_t* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  requireOwned(dst, bytes, "copy destination");
  makeCurrent();
  if (bytes <= kDirectCopyBytes) {
    // Small copies (a hidden state crossing devices) go through the ring like op descriptions,
    // so they can be part of a graph.
    Staged s = stage(bytes);
    std::memcpy(s.host, src, bytes);
    Command c;
    c.copyTo = dptr(dst);
    c.copyFrom = s.host;
    c.copyBytes = bytes;
    enqueue("copy", c);
    return;
  }
  uploadThroughStaging(dptr(dst), src, bytes);
}

void CudaDevice::uploadThroughStaging(CUdeviceptr dst, const void* src, size_t bytes) {
  flush();
  forgetHeldInputs();
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t done = 0, turn = 0; done < bytes; turn ^= 1) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    check(api_.cuEventSynchronize(stagingEvents_[turn]), "cuEventSynchronize");  // its last copy ran
    std::memcpy(staging_[turn], from + done, n);
    check(api_.cuMemcpyHtoDAsync(dst + done, staging_[turn], n, stream_), "cuMemcpyHtoDAsync");
    check(api_.cuEventRecord(stagingEvents_[turn], stream_), "cuEventRecord");
    done += n;
  }
}

void CudaDevice::downloadThroughStaging(void* dst, CUdeviceptr src, size_t bytes) {
  flush();
  auto* out = static_cast<uint8_t*>(dst);
  // Chunk k's copy into pinned buffer k % 2 runs while the host moves chunk k - 1 out of the other.
  size_t waiting = 0, waitingBytes = 0;
  int waitingTurn = -1;
  const auto drain = [&] {
    if (waitingTurn < 0) return;
    check(api_.cuEventSynchronize(stagingEvents_[size_t(waitingTurn)]), "cuEventSynchronize");
    std::memcpy(out + waiting, staging_[size_t(waitingTurn)], waitingBytes);
    waitingTurn = -1;
  };
  for (size_t done = 0, turn = 0; done < bytes; turn ^= 1) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    check(api_.cuEventSynchronize(stagingEvents_[turn]), "cuEventSynchronize");  // its last copy ran
    check(api_.cuMemcpyDtoHAsync(staging_[turn], src + done, n, stream_), "cuMemcpyDtoHAsync");
    check(api_.cuEventRecord(stagingEvents_[turn], stream_), "cuEventRecord");
    drain();
    waiting = done, waitingBytes = n, waitingTurn = int(turn);
    done += n;
  }
  drain();
}

size_t CudaDevice::prepareBlockBuffer(const uint8_t* const* blocks, size_t count, size_t blockBytes, const char* what) {
  JITLLM_REQUIRE(
      count < (size_t(1) << 31) && blockBytes < (size_t(1) << 40) && count * blockBytes / blockBytes == count, info_.id,
      ": ", what, ": ", count, " blocks of ", blockBytes, " bytes");
  for (size_t i = 0; i < count; i++) requireOwned(blocks[i], blockBytes, what);
  makeCurrent();
  opTokens_ = 0;
  const size_t total = count * blockBytes;
  // Growing synchronises and restarts the ring: before anything is staged.
  growScratch(blockBuffer_, blockBufferBytes_, total, "block transfers");
  return total;
}

void CudaDevice::launchBlockCopy(const char* op, CUfunction f, const uint8_t* const* blocks, size_t count,
                                 size_t blockBytes) {
  int wide = blockBytes % 16 == 0;
  Staged s = stage(count * sizeof(uint64_t));
  for (size_t i = 0; i < count; i++) {
    const uint64_t address = uint64_t(reinterpret_cast<uintptr_t>(blocks[i]));
    std::memcpy(s.host + i * sizeof(uint64_t), &address, sizeof address);
    wide = wide && address % 16 == 0;
  }
  commit(s);
  CUdeviceptr list = s.device, buffer = blockBuffer_;
  uint64_t bytes = blockBytes;
  const size_t units = wide ? blockBytes / 16 : blockBytes;
  const unsigned chunks = unsigned(std::clamp<size_t>((units + 255) / 256, 1, 64));
  launch(op, f, unsigned(count), chunks, 256, 0, list, buffer, bytes, wide);
}

void CudaDevice::gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes) {
  if (count == 0 || blockBytes == 0) return;
  if (!blockKernels_) {
    Device::gatherToHost(dst, blocks, count, blockBytes);
    return;
  }
  const size_t total = prepareBlockBuffer(blocks, count, blockBytes, "gathered block");
  launchBlockCopy("gatherBlocks", blockKernels().first, blocks, count, blockBytes);
  downloadThroughStaging(dst, blockBuffer_, total);
}

void CudaDevice::scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes) {
  if (count == 0 || blockBytes == 0) return;
  if (!blockKernels_) {
    Device::scatterFromHost(blocks, src, count, blockBytes);
    return;
  }
  const size_t total = prepareBlockBuffer(blocks, count, blockBytes, "scattered block");
  uploadThroughStaging(blockBuffer_, src, total);
  launchBlockCopy("scatterBlocks", blockKernels().second, blocks, count, blockBytes);
}

void CudaDevice::drain() {
  flush();
  makeCurrent();
  check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void CudaDevice::enablePeerAccess(const CudaDevice& peer) {
  if (peer.context_ == context_ || std::find(peers_.begin(), peers_.end(), peer.device_) != peers_.end()) return;
  int can = 0;
  check(api_.cuDeviceCanAccessPeer(&can, device_, peer.device_), "cuDeviceCanAccessPeer");
  if (can) {
    makeCurrent();
    // Already enabled (by another device of this context) is fine; so is a refusal (too many
    // peers): without a peer link cuMemcpyPeerAsync still works, the driver staging it through the
    // host. Either way the question is asked once per peer.
    (void)api_.cuCtxEnablePeerAccess(peer.context_, 0);
  }
  peers_.push_back(peer.device_);
}

bool CudaDevice::moveBlocksTo(Device& target, const uint8_t* const* from, uint8_t* const* to, size_t count,
                              size_t blockBytes) {
  if (dynamic_cast<CudaDevice*>(&target) == nullptr || !blockKernels_) return false;
  auto& peer = static_cast<CudaDevice&>(target);
  if (!peer.blockKernels_) return false;
  if (count == 0 || blockBytes == 0) return true;
  if (&peer == this) {  // within this device: gather, then scatter, in stream order
    prepareBlockBuffer(from, count, blockBytes, "gathered block");
    prepareBlockBuffer(to, count, blockBytes, "scattered block");
    launchBlockCopy("gatherBlocks", blockKernels().first, from, count, blockBytes);
    launchBlockCopy("scatterBlocks", blockKernels().second, to, count, blockBytes);
    flush();
    peerBlockMoves_++;
    return true;
  }
  // The target's block buffer is written from this device's stream below: nothing queued there
  // may still use it (or the pages about to be overwritten).
  const size_t total = peer.prepareBlockBuffer(to, count, blockBytes, "scattered block");
  peer.drain();
  prepareBlockBuffer(from, count, blockBytes, "gathered block");
  launchBlockCopy("gatherBlocks", blockKernels().first, from, count, blockBytes);
  copyToPeer(peer, peer.blockBuffer_, blockBuffer_, total);
  peer.launchBlockCopy("scatterBlocks", peer.blockKernels().second, to, count, blockBytes);
  peer.flush();
  peerBlockMoves_++;
  return true;
}

void CudaDevice::copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes) {
  if (dynamic_cast<CudaDevice*>(&target) == nullptr) {
    Device::copyToDevice(target, dst, src, bytes);
    return;
  }
  if (bytes == 0) return;
  auto& peer = static_cast<CudaDevice&>(target);
  requireOwned(src, bytes, "copy source");
  peer.requireOwned(dst, bytes, "copy destination");
  peer.drain();
  copyToPeer(peer, dptr(dst), dptr(src), bytes);
}

void CudaDevice::selectCandidates(float* logits, int64_t rows, int64_t vocab,
                                  std::span<const CandidateRequest> requests, int32_t* ids, float* values,
                                  int64_t stride) {
  JITLLM_REQUIRE(int64_t(requests.size()) == rows, "selectCandidates: ", requests.size(), " requests for ", rows,
                 " rows");
  if (rows == 0) return;
  JITLLM_REQUIRE(vocab > 0 && vocab < (int64_t(1) << 31) && stride > 0 && stride <= (int64_t(1) << 20), info_.id,
                 ": selectCandidates: bad shape");
  requireOwned(logits, size_t(rows * vocab) * sizeof(float), "logits");
  // One staged table of the requests (kernels/candidates.h).
  const CandidateTable t = planCandidateTable(requests, stride, kMaxSelectCandidates, info_.id.str());
  Staged s = stage(t.bytes());
  packCandidateTable(requests, t, s.host);
  commit(s);
  const size_t out = size_t(rows) * size_t(stride) * 4;
  growScratch(candidates_, candidatesBytes_, 2 * out, "sampling candidates");
  if (!selectKernel_) selectKernel_ = function(module(samplingModule()), "select_candidates");
  const CUdeviceptr countsPtr = s.device, startsPtr = s.device + t.startsOffset(), idsPtr = s.device + t.idsOffset(),
                    penaltiesPtr = s.device + t.penaltiesOffset(), outIds = candidates_, outValues = candidates_ + out;
  const CUdeviceptr rowsPtr = dptr(logits);
  const int64_t v = vocab;
  const int s32 = int(stride);
  launch("selectCandidates", selectKernel_, unsigned(rows), 1, kSelectThreads, 0, rowsPtr, v, countsPtr, startsPtr,
         idsPtr, penaltiesPtr, outIds, outValues, s32);
  // Ids and values side by side: one read-back, which also ends the step (the ring starts over,
  // so the next step's queue matches this one's graph - two plain downloads left the ring where
  // it was, and every serving step ran launch by launch).
  candidatesHost_.resize(2 * out);
  readBack(candidatesHost_.data(), outIds, 2 * out);
  std::memcpy(ids, candidatesHost_.data(), out);
  std::memcpy(values, candidatesHost_.data() + out, out);
}

void CudaDevice::copyToPeer(CudaDevice& peer, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  flush();
  enablePeerAccess(peer);
  makeCurrent();
  check(api_.cuMemcpyPeerAsync(dst, peer.context_, src, context_, bytes, stream_), "cuMemcpyPeerAsync");
  check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

const std::pair<CUfunction, CUfunction>& CudaDevice::blockKernels() {
  if (!blockCopies_.first) {
    CUmodule m = module(blocksModule());
    blockCopies_ = {function(m, "gather_blocks"), function(m, "scatter_blocks")};
  }
  return blockCopies_;
}

void CudaDevice::copyToHost(void* dst, const uint8_t* src, size_t bytes) {
  if (bytes == 0) return;
  requireOwned(src, bytes, "copy source");
  readBack(dst, dptr(src), bytes);
}

void CudaDevice::readBack(void* dst, CUdeviceptr src, size_t bytes) {
  const auto flushStart = std::chrono::steady_clock::now();
  flush();
  makeCurrent();
  if (timeGraphs_) [[unlikely]] {
    // The host's part of a step: what it did since the last read-back, the flush (a graph found
    // and launched), and the wait for the GPU.
    const auto t0 = std::chrono::steady_clock::now();
    hostTimes_.flush += std::chrono::duration<double>(t0 - flushStart).count();
    check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    const auto t1 = std::chrono::steady_clock::now();
    hostTimes_.waitGpu += std::chrono::duration<double>(t1 - t0).count();
    hostTimes_.reads++;
  }
  const auto copyStart = std::chrono::steady_clock::now();
  // Through the pinned buffers: a step's logits (the 1B's 513 KB) arrive in 52 us this way
  // against 134 us copied straight into pageable memory (H200, docs/cuda.md).
  downloadThroughStaging(dst, src, bytes);
  if (timeGraphs_) [[unlikely]] {
    std::lock_guard lock(pendingMutex_);  // flush() reads lastRead, and may run on another thread
    hostTimes_.lastRead = std::chrono::steady_clock::now();
    hostTimes_.copy += std::chrono::duration<double>(*hostTimes_.lastRead - copyStart).count();
  }
  if (profile_ || timeGraphs_) collectProfile();
  // Everything ran: the ring starts over, so the next step stages at the same addresses as this
  // one and its queue can match a graph; its parts are cut where this step's were.
  nextPartCommands_ = earlySubmitCommands_;
  ringOffset_ = 0;
  ringHalf_ = 0;
}

// ---- staging of op descriptions ----

CudaDevice::Staged CudaDevice::stage(size_t bytes) {
  bytes = roundUp(std::max<size_t>(bytes, 1), kAllocationGranule);
  if (bytes > ringBytes_ / 2) {
    // A description larger than half the ring (a huge batch): grow it once everything queued ran.
    flush();
    check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    dropGraphs();  // they copy from the old ring
    api_.cuMemFree(ringDevice_);
    api_.cuMemFreeHost(ringHost_);
    ringDevice_ = 0;
    ringHost_ = nullptr;
    ringBytes_ = roundUp(bytes * 2, size_t(1) << 20);
    check(api_.cuMemHostAlloc(reinterpret_cast<void**>(&ringHost_), ringBytes_, 0), "cuMemHostAlloc");
    check(api_.cuMemAlloc(&ringDevice_, ringBytes_), "cuMemAlloc (staging ring)");
    ringOffset_ = 0;
    ringHalf_ = 0;
  }
  const size_t half = ringBytes_ / 2;
  if (ringOffset_ + bytes > size_t(ringHalf_ + 1) * half) {
    flush();  // the event must follow the copies queued from this half
    check(api_.cuEventRecord(ringEvents_[size_t(ringHalf_)], stream_), "cuEventRecord");
    ringHalf_ ^= 1;
    ringOffset_ = size_t(ringHalf_) * half;
    // The copies out of the half we enter were queued before its event: wait until they ran.
    check(api_.cuEventSynchronize(ringEvents_[size_t(ringHalf_)]), "cuEventSynchronize");
  }
  Staged s{ringHost_ + ringOffset_, ringDevice_ + ringOffset_, bytes};
  ringOffset_ += bytes;
  return s;
}

void CudaDevice::commit(const Staged& s) {
  Command c;
  c.copyTo = s.device;
  c.copyFrom = s.host;
  c.copyBytes = s.bytes;
  enqueue("copy", c);
}

// ---- kernels ----

ModuleSpec CudaDevice::tuned(const ModuleSpec& given) const {
  ModuleSpec spec = given;
  spec.defines.insert(spec.defines.end(), tuningDefines_.begin(), tuningDefines_.end());
  return spec;
}

std::string CudaDevice::cacheMaterial(const ModuleSpec& spec) const {
  std::string material = spec.source();
  for (const auto& o : compileOptions(arch_)) material += "\n//option " + o;
  material += "\n//arch " + std::to_string(arch_) + " nvrtc " + std::to_string(nvrtcVersionNumber()) + " driver " +
              std::to_string(api_.driverVersion) + "\n";
  return material;
}

CUmodule CudaDevice::module(const ModuleSpec& given) {
  const ModuleSpec spec = tuned(given);
  const std::string key = spec.key();
  if (auto it = modules_.find(key); it != modules_.end()) return it->second;
  if (prepared_) modulesMadeOnUse_++;  // a shape prepareKernels did not foresee
  bool compiled = false;
  const std::vector<char> image = moduleImage(spec, compiled);
  return loadModule(key, image, compiled);
}

std::vector<char> CudaDevice::moduleImage(const ModuleSpec& tunedSpec, bool& compiled) const {
  const std::string material = cacheMaterial(tunedSpec);
  if (auto cached = cache_.load(material)) return std::move(*cached);
  std::vector<char> image = compileModule(tunedSpec, arch_).image;
  compiled = true;
  cache_.store(material, image);
  return image;
}

CUmodule CudaDevice::loadModule(std::string key, const std::vector<char>& image, bool compiled) {
  makeCurrent();
  CUmodule m = nullptr;
  check(api_.cuModuleLoadData(&m, image.data()), "cuModuleLoadData");
  modules_.emplace(std::move(key), m);
  modulesCompiled_ += compiled;
  return m;
}

CUfunction CudaDevice::function(CUmodule m, const char* name) {
  CUfunction f = nullptr;
  check(api_.cuModuleGetFunction(&f, m, name), name);
  return f;
}

CUfunction CudaDevice::matmulKernel(quant::TensorType type, int64_t cols, int align, bool xvec, int variant) {
  const uint64_t key = (uint64_t(type) << 56) | (uint64_t(align) << 48) | (uint64_t(xvec) << 47) |
                       (uint64_t(variant) << 40) | uint64_t(cols);
  if (auto it = matmuls_.find(key); it != matmuls_.end()) return it->second;
  CUfunction f = function(module(matmulModule(type, cols, align, xvec, variant)), variant == 0 ? "get_rows" : "matmul");
  matmuls_.emplace(key, f);
  return f;
}

CUfunction CudaDevice::intMatmulKernel(quant::TensorType type, int64_t cols, int align, int tokens, int rows, bool mma,
                                       int rowWarps) {
  JITLLM_ASSERT(cols > 0 && cols < (int64_t(1) << 30) && rowWarps > 0 && rowWarps < 8);
  const uint64_t key = (uint64_t(type) << 56) | (uint64_t(align) << 48) | (uint64_t(tokens) << 40) |
                       (uint64_t(rows) << 34) | (uint64_t(mma) << 33) | (uint64_t(rowWarps) << 30) | uint64_t(cols);
  if (auto it = intMatmuls_.find(key); it != intMatmuls_.end()) return it->second;
  CUfunction f = function(module(intMatmulModule(type, cols, align, tokens, rows, mma, rowWarps)), "matmul_int");
  intMatmuls_.emplace(key, f);
  return f;
}

const CudaDevice::ElementwiseKernels& CudaDevice::elementwise() {
  if (!elementwise_) {
    CUmodule m = module(elementwiseModule());
    ElementwiseKernels k;
    k.rmsNorm = function(m, "rms_norm");
    k.rope = function(m, "rope");
    k.swiglu = function(m, "swiglu");
    k.geglu = function(m, "geglu");
    k.add = function(m, "add");
    k.scale = function(m, "scale");
    k.kvStore = function(m, "kv_store");
    k.ropeStore = function(m, "rope_store");
    elementwise_ = k;
  }
  return *elementwise_;
}

CUfunction CudaDevice::attentionKernel(int headDim, int group, int pageTokens, bool f16) {
  const uint64_t key = (uint64_t(headDim) << 40) | (uint64_t(group) << 24) | (uint64_t(pageTokens) << 1) | f16;
  if (auto it = attentions_.find(key); it != attentions_.end()) return it->second;
  CUfunction f = function(module(attentionModule(headDim, group, pageTokens, f16, attentionSpan_)), "attention");
  attentions_.emplace(key, f);
  return f;
}

CUfunction CudaDevice::attentionRowsKernel(int headDim, int group, int pageTokens, bool f16, int perBlock) {
  const uint64_t key = (uint64_t(perBlock) << 52) | (uint64_t(headDim) << 40) | (uint64_t(group) << 24) |
                       (uint64_t(pageTokens) << 1) | f16;
  if (auto it = attentionRows_.find(key); it != attentionRows_.end()) return it->second;
  CUfunction f = nullptr;
  const size_t bytes = attentionRowsSharedBytes(headDim, group, perBlock);
  if (bytes <= size_t(maxSharedOptIn_)) {
    f = function(module(attentionModule(headDim, group, pageTokens, f16, attentionSpan_, perBlock)), "attention_rows");
    check(api_.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes)),
          "cuFuncSetAttribute");
  }
  attentionRows_.emplace(key, f);
  return f;
}

CUfunction CudaDevice::attentionSplitKernel(int headDim, int group, int pageTokens, bool f16) {
  const uint64_t key = (uint64_t(headDim) << 40) | (uint64_t(group) << 24) | (uint64_t(pageTokens) << 1) | f16;
  if (auto it = attentionSplits_.find(key); it != attentionSplits_.end()) return it->second;
  CUfunction f = function(module(attentionModule(headDim, group, pageTokens, f16, attentionSpan_)),
                          attentionSpan_ > 0 ? "attention_spans" : "attention_split");
  attentionSplits_.emplace(key, f);
  return f;
}

bool CudaDevice::Command::operator==(const Command& o) const {
  return kernel == o.kernel && gridX == o.gridX && gridY == o.gridY && block == o.block &&
         sharedBytes == o.sharedBytes && paramBytes == o.paramBytes &&
         std::memcmp(params.data(), o.params.data(), paramBytes) == 0 && copyTo == o.copyTo && copyFrom == o.copyFrom &&
         copyBytes == o.copyBytes;
}

size_t CudaDevice::enqueue(const char* op, const Command& c) {
  if (!keepQuantized_) quantized_ = {};  // this op may write the quantized input
  if (!keepHalf_) halfHeld_ = {};        // or the input held in fp16
  producer_ = {};                        // and comes after the producer
  lastAdd_ = {};                         // and after the add
  if (!skipOps_.empty() && opTokens_ <= kProgrammaticMaxTokens) [[unlikely]] {
    for (const std::string& skip : skipOps_) {
      if (std::string_view(op).starts_with(skip)) return kNotQueued;
    }
  }
  if (profile_) [[unlikely]] {
    const bool programmatic = programmaticFor(opTokens_);
    // Each launch at once, between two timing events: the GPU's own time for it, read back at
    // the next synchronisation (collectProfile).
    timed(op, [&] { submit({c}, programmatic); });
    return kNotQueued;
  }
  std::lock_guard lock(pendingMutex_);
  pending_.push_back(c);
  queueTokens_ = std::max(queueTokens_, opTokens_);
  return pending_.size() - 1;
}

bool CudaDevice::replaceIfLastQueued(size_t index, const Command& expected, const Command& replacement) {
  std::lock_guard lock(pendingMutex_);
  if (index + 1 != pending_.size() || !(pending_[index] == expected)) return false;
  pending_[index] = replacement;
  return true;
}

void CudaDevice::offerFusion(size_t index, const Command& c, const float* out, int64_t elements,
                             std::function<std::optional<Command>(CUdeviceptr, uint64_t, int)> fused) {
  if (!integerMatmul_ || !fuse_ || index == kNotQueued) return;
  producer_ = {index, c, out, elements, std::move(fused)};
}

void CudaDevice::submit(const std::vector<Command>& commands, bool programmatic) {
  for (const Command& c : commands) {
    if (!c.kernel) {
      check(api_.cuMemcpyHtoDAsync(c.copyTo, c.copyFrom, c.copyBytes, stream_), "cuMemcpyHtoDAsync");
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
      config.hStream = stream_;
      config.attrs = &attribute;
      config.numAttrs = 1;
      check(api_.cuLaunchKernelEx(&config, c.kernel, nullptr, extra), "cuLaunchKernelEx");
      continue;
    }
    check(api_.cuLaunchKernel(c.kernel, c.gridX, c.gridY, 1, c.block, 1, 1, c.sharedBytes, stream_, nullptr, extra),
          "cuLaunchKernel");
  }
}

void CudaDevice::timed(std::string op, const std::function<void()>& run) {
  Profiled p{std::move(op), nullptr, nullptr};
  for (CUevent* e : {&p.start, &p.end}) {
    if (eventPool_.empty()) {
      check(api_.cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate (profile)");
    } else {
      *e = eventPool_.back();
      eventPool_.pop_back();
    }
  }
  check(api_.cuEventRecord(p.start, stream_), "cuEventRecord");
  run();
  check(api_.cuEventRecord(p.end, stream_), "cuEventRecord");
  profiled_.push_back(std::move(p));
}

void CudaDevice::launchGraph(const Graph& g) {
  const auto run = [&] { check(api_.cuGraphLaunch(g.exec, stream_), "cuGraphLaunch"); };
  if (timeGraphs_) [[unlikely]] {
    timed("graph of " + std::to_string(g.commands.size()) + " commands", run);
  } else {
    run();
  }
  graphLaunches_++;
}

void CudaDevice::collectProfile() {
  for (const Profiled& p : profiled_) {
    float ms = 0;
    check(api_.cuEventElapsedTime(&ms, p.start, p.end), "cuEventElapsedTime");
    OpTime& t = profileTimes_[p.op];
    t.calls++;
    t.seconds += double(ms) / 1e3;
    eventPool_.push_back(p.start);
    eventPool_.push_back(p.end);
  }
  profiled_.clear();
}

void CudaDevice::dropGraphs() {
  std::lock_guard lock(pendingMutex_);
  for (Graph& g : graphs_) api_.cuGraphExecDestroy(g.exec);
  graphs_.clear();
  recentlySubmitted_.clear();
}

void CudaDevice::coalesceStagedCopies(std::vector<Command>& commands) const {
  // The ops' descriptions were staged back to back in the ring, all written before this flush, and
  // no part of the ring is used twice in one queue: one copy of the whole range, ahead of every
  // kernel, replaces a copy per op (each a PCIe round trip the kernels after it waited for).
  size_t lo = SIZE_MAX, hi = 0, staged = 0;
  for (const Command& c : commands) {
    if (c.kernel || c.copyTo != ringDevice_ + CUdeviceptr(c.copyFrom - ringHost_)) continue;
    lo = std::min(lo, size_t(c.copyFrom - ringHost_));
    hi = std::max(hi, size_t(c.copyFrom - ringHost_) + c.copyBytes);
    staged++;
  }
  if (staged < 2) return;
  std::erase_if(commands, [&](const Command& c) {
    return !c.kernel && c.copyTo == ringDevice_ + CUdeviceptr(c.copyFrom - ringHost_);
  });
  Command all;
  all.copyTo = ringDevice_ + lo;
  all.copyFrom = ringHost_ + lo;
  all.copyBytes = hi - lo;
  commands.insert(commands.begin(), all);
}

void CudaDevice::flush() {
  std::lock_guard lock(pendingMutex_);
  if (pending_.empty()) return;
  if (timeGraphs_ && hostTimes_.lastRead) [[unlikely]] {
    hostTimes_.build += std::chrono::duration<double>(std::chrono::steady_clock::now() - *hostTimes_.lastRead).count();
    hostTimes_.lastRead.reset();
    hostTimes_.builds++;
  }
  std::vector<Command> commands;
  commands.swap(pending_);
  const bool programmatic = programmaticFor(queueTokens_);
  queueTokens_ = 0;
  coalesceStagedCopies(commands);
  makeCurrent();
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
  // Capture it, keep it, and run it as a graph.
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  check(api_.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  try {
    submit(commands, programmatic);
  } catch (...) {
    api_.cuStreamEndCapture(stream_, &graph);
    if (graph) api_.cuGraphDestroy(graph);
    throw;
  }
  check(api_.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  const CUresult instantiated = api_.cuGraphInstantiateWithFlags(&exec, graph, 0);
  api_.cuGraphDestroy(graph);
  check(instantiated, "cuGraphInstantiate");
  if (graphs_.size() == kMaxGraphs) {
    auto oldest = std::min_element(graphs_.begin(), graphs_.end(),
                                   [](const Graph& a, const Graph& b) { return a.lastUsed < b.lastUsed; });
    api_.cuGraphExecDestroy(oldest->exec);
    graphs_.erase(oldest);
  }
  graphs_.push_back({std::move(commands), exec, flushes_, programmatic});
  graphsCaptured_++;
  launchGraph(graphs_.back());
}

// ---- ops ----

void CudaDevice::getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) {
  opTokens_ = n;
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
  requireOwned(table.data, table.rowStride * size_t(table.rows - 1) + *quant::rowBytes(table.type, table.cols),
               "embedding table");
  requireOwned(out, size_t(n * table.cols) * sizeof(float), "getRows output");
  makeCurrent();
  const int align = commonAlignment(reinterpret_cast<uintptr_t>(table.data), table.rowStride);
  JITLLM_REQUIRE(align >= 2, info_.id, ": weight rows must be 2-byte aligned");
  CUfunction f = matmulKernel(table.type, table.cols, align, table.cols % 4 == 0, 0);
  Staged s = stage(size_t(n) * sizeof(int32_t));
  std::memcpy(s.host, ids, size_t(n) * sizeof(int32_t));
  commit(s);
  CUdeviceptr tablePtr = dptr(table.data), idsPtr = s.device, outPtr = dptr(out);
  uint64_t stride = table.rowStride;
  const unsigned chunks = unsigned(std::min<int64_t>((table.cols + 2047) / 2048, 64));
  launch("getRows", f, chunks, unsigned(n), 256, 0, tablePtr, stride, idsPtr, outPtr);
}

void CudaDevice::rmsNorm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  opTokens_ = rows;
  if (rows == 0) return;
  JITLLM_REQUIRE(rows < (int64_t(1) << 31) && dim > 0 && dim < (int64_t(1) << 31), info_.id, ": rmsNorm: bad shape");
  requireOwned(x, size_t(rows * dim) * 4, "rmsNorm input");
  requireOwned(weight, size_t(dim) * 4, "rmsNorm weight");
  requireOwned(out, size_t(rows * dim) * 4, "rmsNorm output");
  makeCurrent();
  CUdeviceptr xp = dptr(x), wp = dptr(weight), op = dptr(out), addend = 0;
  int d = int(dim);
  const CUfunction f = elementwise().rmsNorm;
  const auto make = [=](CUdeviceptr add, CUdeviceptr xq, uint64_t stride) {
    return makeLaunch(f, unsigned(rows), 1, kNormThreads, 0, xp, wp, op, d, eps, xq, stride, add);
  };
  // x += y just queued (the residual add) is done by this kernel as it reads x: the add's launch
  // is replaced.
  size_t index = kNotQueued;
  if (fuse_ && lastAdd_.x == x && lastAdd_.elements == rows * dim &&
      replaceIfLastQueued(lastAdd_.index, lastAdd_.command, make(dptr(lastAdd_.y), 0, 0))) {
    addend = dptr(lastAdd_.y);
    index = lastAdd_.index;
  }
  const Command c = make(addend, 0, 0);
  if (index != kNotQueued) {
    lastAdd_ = {};
    forgetHeldInputs();
    producer_ = {};
    fusedAdds_++;
  } else {
    index = enqueue("rmsNorm", c);
  }
  offerFusion(index, c, out, rows * dim, [=](CUdeviceptr xq, uint64_t stride, int k) -> std::optional<Command> {
    if (k != d || d % 32 != 0) return std::nullopt;
    return make(addend, xq, stride);
  });
}

int CudaDevice::checkMatmul(const WeightRef& w, const float* x, int64_t tokens, const float* y,
                            const float* bias) const {
  JITLLM_REQUIRE(cudaSupportsWeightType(w.type), info_.id, ": matmul: weight type ", quant::typeName(w.type),
                 " is not supported");
  const auto rowBytes = quant::rowBytes(w.type, w.cols);
  JITLLM_REQUIRE(rowBytes && w.rows < (int64_t(1) << 31) && w.cols > 0 && w.cols < (int64_t(1) << 30) &&
                     tokens < (int64_t(1) << 31) && w.rowStride >= *rowBytes,
                 info_.id, ": matmul: bad shape ", w.rows, " x ", w.cols, " of ", quant::typeName(w.type));
  requireOwned(w.data, w.rowStride * size_t(w.rows - 1) + *rowBytes, "weight matrix");
  requireOwned(x, size_t(tokens * w.cols) * 4, "matmul input");
  requireOwned(y, size_t(tokens * w.rows) * 4, "matmul output");
  if (bias) requireOwned(bias, size_t(w.rows) * 4, "bias");
  const int align = commonAlignment(reinterpret_cast<uintptr_t>(w.data), w.rowStride);
  JITLLM_REQUIRE(align >= 2, info_.id, ": weight rows must be 2-byte aligned");
  return align;
}

void CudaDevice::matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) {
  opTokens_ = tokens;
  if (tokens == 0 || w.rows == 0) return;
  const int align = checkMatmul(w, x, tokens, y, bias);
  makeCurrent();
  if (promptProduct(w, x, tokens)) {
    matmulPromptSplit(w, x, tokens, y, bias, align);
    return;
  }
  matmulRows(w, x, tokens, y, bias, align);
}

void CudaDevice::matmulRows(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                            int align) {
  if (integerMatmul_ && cudaIntegerMatmulType(w.type, w.cols)) {
    matmulInteger(w, x, tokens, y, bias, align);
    return;
  }
  const bool xvec = w.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  // Tokens per warp: enough to reuse each decoded weight, few enough to keep a prefill's grid
  // wide. Rows per warp (1, 2 or 4) as matmul.cuh's JL_VARIANT says.
  const int perWarpTokens = warpTokens(tokens);
  const int perWarpRows = perWarpTokens == 16 ? 4 : perWarpTokens == 4 ? 2 : 1;
  CUfunction f = matmulKernel(w.type, w.cols, align, xvec, perWarpTokens);
  CUdeviceptr wp = dptr(w.data), xp = dptr(x), yp = dptr(y), bp = dptr(bias);
  uint64_t stride = w.rowStride;
  int rows = int(w.rows), t = int(tokens);
  launchMatmul("matmul", f, w, tokens, perWarpTokens, perWarpRows, perWarpRows, wp, stride, rows, xp, t, yp, bp);
}

namespace {
// matmul_int.cuh's ProductParts, as its ABI lays it out.
struct ProductPartAbi {
  CUdeviceptr w = 0;
  uint64_t rowStride = 0;
  CUdeviceptr y = 0, bias = 0;
  int32_t rows = 0, blocks = 0;
};
struct ProductPartsAbi {
  std::array<ProductPartAbi, 3> part;
};
static_assert(sizeof(ProductPartsAbi) == 120 && alignof(ProductPartsAbi) == 8);

bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bBytes && y < x + aBytes;
}
}  // namespace

void CudaDevice::matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) {
  opTokens_ = tokens;
  for (const MatmulTarget& t : targets) {
    if (promptProduct(t.w, x, tokens)) {
      // Prompt rows among them: each product alone, its prompt rows on gemm_f16.
      Device::matmuls(targets, x, tokens);
      return;
    }
  }
  // One launch when every product runs on the dp4a kernels (integer types, one row length) in
  // decode shapes - the launches, not the bytes, are what a decode step's small products cost.
  std::array<WeightRef, 3> weights;
  for (size_t i = 0; i < targets.size() && i < weights.size(); i++) weights[i] = targets[i].w;
  const std::span<const WeightRef> ws(weights.data(), std::min(targets.size(), weights.size()));
  bool grouped = targets.size() <= weights.size() && groupable(ws, tokens);
  for (size_t i = 0; grouped && i < targets.size(); i++) {
    const MatmulTarget& t = targets[i];
    grouped = !overlaps(t.y, size_t(tokens * t.w.rows) * 4, x, size_t(tokens * t.w.cols) * 4);
    for (size_t j = 0; grouped && j < i; j++) {
      grouped = !overlaps(t.y, size_t(tokens * t.w.rows) * 4, targets[j].y, size_t(tokens * targets[j].w.rows) * 4);
    }
  }
  if (!grouped) {
    Device::matmuls(targets, x, tokens);
    return;
  }
  const int64_t cols = targets[0].w.cols;
  const int perWarpTokens = groupWarpTokens(tokens);
  for (const MatmulTarget& t : targets) checkMatmul(t.w, x, tokens, t.y, t.bias);
  int align = 16;
  const std::vector<IntMatmulPart> parts = groupedParts(ws, tokens, align);
  ProductPartsAbi abi;
  unsigned blocks = 0;
  std::string shape;
  for (size_t i = 0; i < targets.size(); i++) {
    const MatmulTarget& t = targets[i];
    const int rows = parts[i].rows;
    const int64_t rowsPerBlock = 4 * int64_t(intMatmulRowsPerWarp(t.w.type, cols, rows));
    abi.part[i] = {dptr(t.w.data), t.w.rowStride,     dptr(t.y),
                   dptr(t.bias),   int32_t(t.w.rows), int32_t((t.w.rows + rowsPerBlock - 1) / rowsPerBlock)};
    blocks += unsigned(abi.part[i].blocks);
    if (named())
      shape += std::string(i ? " + " : "") + std::string(quant::typeName(t.w.type)) + " " + std::to_string(t.w.rows) +
               "x" + std::to_string(cols) + " r" + std::to_string(rows);
  }
  makeCurrent();
  // Looked up without building the module's spec and key: this runs twice per layer and step.
  GroupKey key{cols, align, perWarpTokens, 0, 0, 0};
  for (size_t i = 0; i < parts.size(); i++) key[3 + i] = int64_t(parts[i].type) * 64 + parts[i].rows;
  auto it = groupMatmuls_.find(key);
  if (it == groupMatmuls_.end()) {
    const ModuleSpec spec = intMatmulGroupModule(parts, cols, align, perWarpTokens);
    it = groupMatmuls_.emplace(key, function(module(spec), "matmul_int_group")).first;
  }
  const KeepInput keep(keepQuantized_);
  uint64_t xqStride = quantizeInput(x, tokens, cols);
  CUdeviceptr xqPtr = xq_;
  int t = int(tokens);
  const std::string op =
      named() ? "matmul_int_group t" + std::to_string(perWarpTokens) + " " + shape : "matmul_int_group";
  groupedProducts_++;
  launch(op.c_str(), it->second, blocks, unsigned((tokens + perWarpTokens - 1) / perWarpTokens), 128, 0, abi, xqPtr,
         xqStride, t);
  submitEarly();
}

void CudaDevice::submitEarly() {
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

int CudaDevice::intRowsPerWarp(const WeightRef& w, int perWarpTokens) const {
  // Decode: two rows per warp on tall matrices (each lane's activations serve both), one on the
  // rest so the grid still covers the GPU. Prefill: 4 or 16 tokens by 4 rows per warp reuse each
  // weight and each activation load (2 rows: pp512 6200 tok/s on the 1B shape, 4: 9200; H200).
  if (perWarpTokens == 1) return intDecodeRows_ > 0 ? intDecodeRows_ : w.rows < 4096 ? 1 : 2;
  return intPrefillRows_ > 0 ? intPrefillRows_ : 4;
}

CudaDevice::IntProduct CudaDevice::intProduct(const WeightRef& w, int align, int64_t tokens) const {
  // q4_K and q6_K products of kTensorCoreMinTokens tokens or more: on tensor cores, blocks of 64 rows x 32 (or
  // tensorCoreTokens_) tokens staged in shared memory - the same bits. q4_K rows are staged by
  // 16-byte copies, so they must be 16-byte aligned (GGUF's are); q6_K's 2-byte aligned blocks by
  // 4-byte words. The q6_K kernel addresses the activations by 32-bit offsets.
  const uint64_t xqStride = uint64_t(quantizedRowBytes(w.cols));
  const bool mma = tensorCores_ && tokens >= kTensorCoreMinTokens && uint64_t(tokens) * xqStride <= UINT32_MAX &&
                   ((w.type == quant::TensorType::kQ4_K && align >= 16) || w.type == quant::TensorType::kQ6_K);
  if (mma) {
    const int blockTokens =
        tensorCoreBlockTokens(w.rows, tokens, tensorCoreTokens_, tensorCoreTokensChosen_, multiprocessors_);
    // A chosen row-warp count of 1 with 64-token blocks (the width chosen per product) takes 2.
    const int rowWarps = tensorCoreRowWarps_ ? std::max(*tensorCoreRowWarps_, blockTokens == 64 ? 2 : 1)
                                             : tensorCoreRowWarps(w.rows, tokens, blockTokens, multiprocessors_);
    return {true, blockTokens / 2, 16, rowWarps};
  }
  const int perWarpTokens = warpTokens(tokens);
  return {false, perWarpTokens, intRowsPerWarp(w, perWarpTokens)};
}

bool CudaDevice::groupable(std::span<const WeightRef> ws, int64_t tokens) const {
  // One launch when every product runs on the dp4a kernels (integer types, one row length) in
  // decode shapes - the launches, not the bytes, are what a decode step's small products cost.
  if (!integerMatmul_ || !fuse_ || ws.size() < 2 || ws.size() > 3 || tokens <= 0 || tokens > kGroupMaxTokens)
    return false;
  for (const WeightRef& w : ws) {
    if (w.rows <= 0 || w.cols != ws[0].cols || !cudaIntegerMatmulType(w.type, w.cols)) return false;
  }
  return true;
}

std::vector<IntMatmulPart> CudaDevice::groupedParts(std::span<const WeightRef> ws, int64_t tokens, int& align) const {
  align = 16;  // the q4_K parts' (q6_K rows are read at any 2-byte alignment)
  std::vector<IntMatmulPart> parts;
  for (const WeightRef& w : ws) {
    if (w.type == quant::TensorType::kQ4_K)
      align = std::min(align, commonAlignment(reinterpret_cast<uintptr_t>(w.data), w.rowStride));
    parts.push_back({w.type, intRowsPerWarp(w, groupWarpTokens(tokens))});
  }
  return parts;
}

template <typename... A>
void CudaDevice::launchMatmul(const char* kernel, CUfunction f, const WeightRef& w, int64_t tokens, int perWarpTokens,
                              int perWarpRows, int rowsPerWarp, const A&... args) {
  const int64_t rowsPerBlock = 4 * int64_t(rowsPerWarp);  // 4 warps of 128 threads
  const int64_t gridY = (tokens + perWarpTokens - 1) / perWarpTokens;
  JITLLM_REQUIRE(gridY < 65536, info_.id, ": matmul: ", tokens, " tokens in one call are too many");
  char op[64];
  std::snprintf(op, sizeof op, "%s", kernel);
  if (named())
    std::snprintf(op, sizeof op, "%s %s %lldx%lld t%d r%d", kernel, std::string(quant::typeName(w.type)).c_str(),
                  (long long)w.rows, (long long)w.cols, perWarpTokens, perWarpRows);
  launch(op, f, unsigned((w.rows + rowsPerBlock - 1) / rowsPerBlock), unsigned(gridY), 128, 0, args...);
}

bool CudaDevice::growScratch(CUdeviceptr& buffer, size_t& bytes, size_t need, const char* what) {
  if (need <= bytes) return false;
  // Queued kernels may still use the old buffer: run them first (growth is rare - the first op of
  // each larger batch or context), and graphs that name it go too.
  flush();
  check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  dropGraphs();
  if (buffer) {
    api_.cuMemFree(buffer);
    releaseMemory(bytes);
    buffer = 0;
    bytes = 0;
  }
  const size_t rounded = (need + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
  check(api_.cuMemAlloc(&buffer, rounded), what);
  bytes = rounded;
  chargeMemory(rounded);
  return true;
}

uint64_t CudaDevice::quantizeInput(const float* x, int64_t tokens, int64_t cols) {
  const size_t rowBytes = size_t(quantizedRowBytes(cols));
  if (growScratch(xq_, xqBytes_, rowBytes * size_t(tokens), "quantized activations")) quantized_ = {};
  if (quantized_.holds(x, tokens, cols)) return rowBytes;
  // The op that just produced x writes its integer form too, if it can; else quantize_x does.
  std::optional<Command> fused;
  if (producer_.fused && producer_.out == x && producer_.elements == tokens * cols) {
    fused = producer_.fused(xq_, rowBytes, int(cols));
  }
  if (fused && replaceIfLastQueued(producer_.index, producer_.command, *fused)) {
    fusedQuantizations_++;
  } else {
    if (!quantize_) quantize_ = function(module(elementwiseModule()), "quantize_x");
    CUdeviceptr xp = dptr(x), xqPtr = xq_;
    int k = int(cols);
    uint64_t stride = rowBytes;
    launch("quantize_x", quantize_, unsigned((cols + 255) / 256), unsigned(tokens), 256, 0, xp, k, xqPtr, stride);
    separateQuantizations_++;
  }
  quantized_ = {x, tokens, cols};
  return rowBytes;
}

void CudaDevice::matmulInteger(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                               int align) {
  const KeepInput keep(keepQuantized_);
  uint64_t xqStride = quantizeInput(x, tokens, w.cols);
  CUdeviceptr xqPtr = xq_;
  const IntProduct choice = intProduct(w, align, tokens);
  CUdeviceptr wp = dptr(w.data), yp = dptr(y), bp = dptr(bias);
  uint64_t stride = w.rowStride;
  int rows = int(w.rows), t = int(tokens);
  if (choice.mma) {
    const int blockTokens = 2 * choice.tokens, blockRows = 16 * choice.rowWarps;
    CUfunction f = intMatmulKernel(w.type, w.cols, align, choice.tokens, 16, true, choice.rowWarps);
    char op[64] = "matmul_mma";
    if (profile_)
      std::snprintf(op, sizeof op, "matmul_mma %s %lldx%lld w%d", std::string(quant::typeName(w.type)).c_str(),
                    (long long)w.rows, (long long)w.cols, choice.rowWarps);
    launch(op, f, unsigned((w.rows + blockRows - 1) / blockRows), unsigned((tokens + blockTokens - 1) / blockTokens),
           unsigned(64 * choice.rowWarps), 0, wp, stride, rows, xqPtr, xqStride, t, yp, bp);
    tensorCoreProducts_++;
  } else {
    const int perWarpTokens = choice.tokens;
    const int perWarpRows = choice.rows;
    CUfunction f = intMatmulKernel(w.type, w.cols, align, perWarpTokens, perWarpRows, false);
    launchMatmul("matmul_int", f, w, tokens, perWarpTokens, perWarpRows,
                 intMatmulRowsPerWarp(w.type, w.cols, perWarpRows), wp, stride, rows, xqPtr, xqStride, t, yp, bp);
  }
  // A product whose output overwrites its own input leaves xq_ describing bytes that changed.
  quantized_.forgetIfWritten(y, size_t(tokens * w.rows) * sizeof(float));
}

// ---- the prompt path (gemm_f16.cuh) ----

void CudaDevice::setPromptRows(std::span<const RowRange> ranges, int64_t tokens) {
  promptRows_.set(ranges, tokens, info_.id);
}

bool CudaDevice::promptMatrix(const WeightRef& w) const {
  // Quantized types and f16 (which fp16 holds exactly); f32 and bf16 would lose range or bits.
  const bool halfExact = w.type == quant::TensorType::kF16 || quant::typeTraits(w.type).blockElems > 1;
  return promptGemm_ && cudaSupportsWeightType(w.type) && halfExact && w.rows > 0 && w.cols % 32 == 0;
}

bool CudaDevice::promptProduct(const WeightRef& w, const float* x, int64_t tokens) const {
  if (!promptRows_.in(tokens)) return false;
  return promptMatrix(w) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void CudaDevice::matmulPromptSplit(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                                   int align) {
  // Runs of rows in order: decode rows before a prompt range, the range, ...; each run's rows are
  // contiguous in x and y.
  const int64_t K = w.cols, N = w.rows;
  promptRows_.forEachRun(tokens, [&](int64_t begin, int64_t end, bool prompt) {
    if (prompt) {
      matmulPrompt(w, x + begin * K, end - begin, y + begin * N, bias, align);
    } else {
      matmulRows(w, x + begin * K, end - begin, y + begin * N, bias, align);
    }
  });
}

int CudaDevice::promptBlockRows(int64_t rows, int64_t tokens) const {
  if (promptBlockRowsChosen_) return promptBlockRowsChosen_;
  // Taller blocks do more mma per shared-memory load (a warp's tile is 32 rows x 64 tokens at 128,
  // x 16 at 32), but need many blocks to keep every SM busy: measured on an H200 (docs/cuda.md),
  // 128 rows won only where its blocks made about two for each multiprocessor (8192 x 2048 over
  // 512 tokens: 256 blocks, 74 us against 109 at 32 rows); with one or fewer (2048 and 3072 rows)
  // 32 rows won by 12-30 %, and 64 rows never won.
  const int64_t tokenBlocks = (tokens + 127) / 128;
  return (rows + 127) / 128 * tokenBlocks * 2 >= 3 * int64_t(multiprocessors_) ? 128 : 32;
}

const CudaDevice::PromptKernels& CudaDevice::promptKernels(quant::TensorType type, int64_t cols, int align,
                                                           int blockRows) {
  const std::array<int64_t, 4> key{int64_t(type), cols, align, blockRows};
  if (auto it = promptKernels_.find(key); it != promptKernels_.end()) return it->second;
  const int slice = promptSlice(cols);
  CUmodule m = module(promptGemmModule(type, cols, align, blockRows, slice));
  PromptKernels k{function(m, "dequant_f16"), function(m, "to_f16"), function(m, "gemm_f16")};
  const size_t shared = promptGemmSharedBytes(blockRows, slice);
  JITLLM_REQUIRE(shared <= size_t(maxSharedOptIn_), info_.id, ": gemm_f16 needs ", shared,
                 " bytes of shared memory a block");
  check(api_.cuFuncSetAttribute(k.gemm, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared)),
        "cuFuncSetAttribute");
  return promptKernels_.emplace(key, k).first->second;
}

void CudaDevice::matmulPrompt(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                              int align) {
  const int64_t K = w.cols, N = w.rows;
  const int blockRows = promptBlockRows(N, tokens);
  const PromptKernels& k = promptKernels(w.type, K, align, blockRows);
  const KeepInput keep(keepHalf_);
  growScratch(halfWeights_, halfWeightsBytes_, size_t(N * K) * 2, "fp16 weights");
  if (growScratch(halfInput_, halfInputBytes_, size_t(tokens * K) * 2, "fp16 activations")) halfHeld_ = {};
  CUdeviceptr wp = dptr(w.data), wh = halfWeights_, xp = dptr(x), xh = halfInput_, yp = dptr(y), bp = dptr(bias);
  uint64_t stride = w.rowStride;
  int rows = int(N), t = int(tokens);
  char op[64] = "matmul_prompt";
  if (named())
    std::snprintf(op, sizeof op, "matmul_prompt %s %lldx%lld b%d", std::string(quant::typeName(w.type)).c_str(),
                  (long long)N, (long long)K, blockRows);
  launch("dequant_f16", k.dequant, unsigned(N), unsigned((K + 2047) / 2048), 256, 0, wp, stride, wh);
  if (!halfHeld_.holds(x, tokens, K)) {
    launch("to_f16", k.toHalf, unsigned(tokens), unsigned((K + 1023) / 1024), 256, 0, xp, xh);
    halfHeld_ = {x, tokens, K};
  }
  launch(op, k.gemm, unsigned((N + blockRows - 1) / blockRows), unsigned((tokens + 127) / 128), 256,
         unsigned(promptGemmSharedBytes(blockRows, promptSlice(K))), wh, rows, xh, t, yp, bp);
  promptProducts_++;
  // A product whose output overwrites its own input leaves halfInput_ describing bytes that changed.
  halfHeld_.forgetIfWritten(y, size_t(tokens * N) * sizeof(float));
}

size_t CudaDevice::ropeBytes(const RopeParams& params, int64_t tokens) {
  return roundUp(size_t(params.rotaryDims / 2) * sizeof(double) + size_t(tokens) * sizeof(int32_t), 8);
}

void CudaDevice::writeRope(uint8_t* at, const RopeParams& params, const int32_t* positions, int64_t tokens) {
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

void CudaDevice::checkRope(const RopeParams& params, int headDim, int64_t tokens) const {
  JITLLM_REQUIRE(params.rotaryDims > 0 && params.rotaryDims <= headDim && params.rotaryDims % 2 == 0,
                 "rope: rotary dims ", params.rotaryDims, " do not fit head dim ", headDim);
  JITLLM_REQUIRE(tokens < (int64_t(1) << 31), info_.id, ": rope: too many tokens");
}

size_t CudaDevice::kvSlotBytes(int64_t tokens) { return size_t(tokens) * (sizeof(uint64_t) + sizeof(int32_t)); }

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
  requireOwned(k, size_t(tokens * width) * 4, "kvStore K");
  requireOwned(v, size_t(tokens * width) * 4, "kvStore V");
  return width;
}

void CudaDevice::rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
                      const RopeParams& params) {
  opTokens_ = tokens;
  checkRope(params, headDim, tokens);
  if (tokens == 0) return;
  requireOwned(x, size_t(tokens) * size_t(heads) * size_t(headDim) * 4, "rope input");
  makeCurrent();
  const int half = params.rotaryDims / 2;
  Staged s = stage(ropeBytes(params, tokens));
  writeRope(s.host, params, positions, tokens);
  commit(s);
  CUdeviceptr xp = dptr(x), invPtr = s.device, posPtr = s.device + size_t(half) * sizeof(double);
  int h = heads, hd = headDim, hf = half, neox = params.neox ? 1 : 0;
  double scale = double(params.freqScale);
  float mscale = params.attnFactor;
  launch("rope", elementwise().rope, unsigned(tokens), 1, 128, size_t(2 * half) * sizeof(float), xp, h, hd, posPtr,
         invPtr, hf, scale, neox, mscale);
}

void CudaDevice::kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) {
  opTokens_ = tokens;
  if (tokens == 0) return;
  const int64_t width = checkKvStore(k, v, tokens, layout);
  makeCurrent();
  Staged s = stage(kvSlotBytes(tokens));
  writeKvSlots(s.host, slots, tokens, layout);
  commit(s);
  CUdeviceptr kp = dptr(k), vp = dptr(v), pagesPtr = s.device, slotsPtr = s.device + size_t(tokens) * sizeof(uint64_t);
  int wd = int(width), pt = layout.pageTokens, f16 = layout.precision == KvPrecision::kF16 ? 1 : 0;
  launch("kvStore", elementwise().kvStore, unsigned(tokens), 1, 256, 0, kp, vp, pagesPtr, slotsPtr, wd, pt, f16);
}

void CudaDevice::ropeAndStore(float* q, float* k, const float* v, int64_t tokens, int heads, int kvHeads,
                              const int32_t* positions, const RopeParams& params, const KvSlot* slots,
                              const KvLayout& layout) {
  opTokens_ = tokens;
  if (!fuse_) {
    Device::ropeAndStore(q, k, v, tokens, heads, kvHeads, positions, params, slots, layout);
    return;
  }
  const int headDim = layout.headDim;
  checkRope(params, headDim, tokens);
  if (tokens == 0) return;
  JITLLM_REQUIRE(kvHeads == layout.kvHeads, info_.id, ": ropeAndStore: ", kvHeads, " KV heads, the layout has ",
                 layout.kvHeads);
  requireOwned(q, size_t(tokens) * size_t(heads) * size_t(headDim) * 4, "rope input");
  checkKvStore(k, v, tokens, layout);
  makeCurrent();
  const int half = params.rotaryDims / 2;
  const size_t ropeAt = ropeBytes(params, tokens);
  Staged s = stage(ropeAt + kvSlotBytes(tokens));
  writeRope(s.host, params, positions, tokens);
  writeKvSlots(s.host + ropeAt, slots, tokens, layout);
  commit(s);
  CUdeviceptr qp = dptr(q), kp = dptr(k), vp = dptr(v), invPtr = s.device,
              posPtr = s.device + size_t(half) * sizeof(double), pagesPtr = s.device + ropeAt,
              slotsPtr = s.device + ropeAt + size_t(tokens) * sizeof(uint64_t);
  int h = heads, kvh = kvHeads, hd = headDim, hf = half, neox = params.neox ? 1 : 0, pt = layout.pageTokens,
      f16 = layout.precision == KvPrecision::kF16 ? 1 : 0;
  double scale = double(params.freqScale);
  float mscale = params.attnFactor;
  const int64_t items = int64_t(heads + kvHeads) * half + int64_t(kvHeads) * headDim;  // rope_store's, per token
  launch("ropeStore", elementwise().ropeStore, unsigned(tokens), unsigned((items + 255) / 256), 256, 0, qp, kp, vp, h,
         kvh, hd, posPtr, invPtr, hf, scale, neox, mscale, pagesPtr, slotsPtr, pt, f16);
}

void CudaDevice::attention(const float* q, float* out, const AttentionBatch& batch) {
  opTokens_ = batch.tokens;
  if (batch.tokens == 0) return;
  const KvLayout& kv = batch.kv;
  JITLLM_REQUIRE(kv.kvHeads > 0 && batch.heads % kv.kvHeads == 0 && kv.headDim > 0 && kv.headDim <= 256 &&
                     kv.pageTokens > 0 && batch.tokens < (int64_t(1) << 31),
                 info_.id, ": attention: ", batch.heads, " heads over ", kv.kvHeads, " KV heads of dim ", kv.headDim,
                 " is not supported");
  const int group = batch.heads / kv.kvHeads;
  // The kernel keeps one KV head's group of queries in shared memory beside its K/V tiles.
  JITLLM_REQUIRE(group * kv.headDim <= 2048, info_.id, ": attention: ", group, " query heads of dim ", kv.headDim,
                 " per KV head is not supported");
  const size_t elems = size_t(batch.tokens) * size_t(batch.heads) * size_t(kv.headDim);
  requireOwned(q, elems * 4, "attention queries");
  requireOwned(out, elems * 4, "attention output");
  makeCurrent();
  // One copy of each distinct page table (tokens of one session share theirs), as long as the
  // longest of its tokens needs. With a sliding window the entries of pages before a token's
  // window may be null (freed): they are copied as they are, and no kernel reads them (attention.cuh
  // starts every token's positions at its window).
  const int window = std::max(0, batch.window);
  std::vector<std::pair<const uint8_t* const*, size_t>> tables;  // table, pages needed
  std::vector<int32_t> tableOf(static_cast<size_t>(batch.tokens));
  int maxPositions = 0;  // the most positions a token of the batch attends to
  bool slid = false;     // some token's window starts past position 0
  for (int64_t t = 0; t < batch.tokens; t++) {
    JITLLM_REQUIRE(batch.positions[t] >= 0, info_.id, ": attention: negative position");
    const int seen = batch.positions[t] + 1;
    maxPositions = std::max(maxPositions, window > 0 ? std::min(seen, window) : seen);
    slid = slid || (window > 0 && seen > window);
    const size_t need = size_t(batch.positions[t]) / size_t(kv.pageTokens) + 1;
    size_t i = 0;
    while (i < tables.size() && tables[i].first != batch.pageTables[t]) i++;
    if (i == tables.size()) tables.push_back({batch.pageTables[t], 0});
    tables[i].second = std::max(tables[i].second, need);
    tableOf[size_t(t)] = int32_t(i);
  }
  std::vector<int32_t> tableStart(tables.size());
  size_t totalPages = 0;
  for (size_t i = 0; i < tables.size(); i++) {
    tableStart[i] = int32_t(totalPages);
    totalPages += tables[i].second;
  }
  // Few blocks (decode: a handful of KV heads per token): a block per query head instead of per
  // KV head (unless that would cost the fused quantization of the output, which needs a block's
  // columns in whole 32-column blocks), and over a long context each 64-position chunk its own
  // block, then the chunks folded in order - the same bits as one block per KV head
  // (attention.cuh). The chunk count is rounded up to 8 so a decode step's queue (and its graph)
  // stays the same for 512 positions at a time. The scratch grows before anything is staged
  // (growing synchronises, and the staging ring starts over after that).
  const bool fewBlocks = batch.tokens * kv.kvHeads < multiprocessors_;
  const bool perHead = attentionPerHead_ && fewBlocks && (kv.headDim % 32 == 0 || (group * kv.headDim) % 32 != 0);
  const int blockGroup = perHead ? 1 : group;       // query heads per block
  const int headBlocks = batch.heads / blockGroup;  // blocks per token and chunk
  const int maxChunks = (maxPositions + 8 * kAttentionChunk - 1) / (8 * kAttentionChunk) * 8;
  const bool split =
      splitPast_ > 0 && fewBlocks && maxPositions > splitPast_ && int64_t(headBlocks) * maxChunks < 65536;
  if (split) {
    const size_t partialFloats = size_t(blockGroup) * size_t(kv.headDim + 2);
    growScratch(partials_, partialsBytes_,
                size_t(batch.tokens) * size_t(headBlocks) * size_t(maxChunks) * partialFloats * sizeof(float),
                "attention partials");
    // attention_split's chunk counters start at zero, and each launch leaves them at zero.
    if (growScratch(chunkCounters_, chunkCountersBytes_, size_t(batch.tokens) * size_t(headBlocks) * sizeof(uint32_t),
                    "attention chunk counters")) {
      check(api_.cuMemsetD32Async(chunkCounters_, 0, chunkCountersBytes_ / 4, stream_), "cuMemsetD32Async");
    }
  }
  const size_t intBytes = roundUp(size_t(batch.tokens) * sizeof(int32_t), 16);
  Staged s = stage(2 * intBytes + totalPages * sizeof(uint64_t));
  auto* positions = reinterpret_cast<int32_t*>(s.host);
  auto* offsets = reinterpret_cast<int32_t*>(s.host + intBytes);
  auto* pages = reinterpret_cast<uint64_t*>(s.host + 2 * intBytes);
  std::memcpy(positions, batch.positions, size_t(batch.tokens) * sizeof(int32_t));
  for (int64_t t = 0; t < batch.tokens; t++) offsets[t] = tableStart[size_t(tableOf[size_t(t)])];
  for (size_t i = 0; i < tables.size(); i++) {
    for (size_t p = 0; p < tables[i].second; p++) {
      pages[size_t(tableStart[i]) + p] = uint64_t(reinterpret_cast<uintptr_t>(tables[i].first[p]));
    }
  }
  commit(s);
  if (blockGroup != group) perHeadAttentions_++;
  CUdeviceptr qp = dptr(q), op = dptr(out), posPtr = s.device, offPtr = s.device + intBytes,
              pagesPtr = s.device + 2 * intBytes;
  int heads = batch.heads, kvHeads = kv.kvHeads;
  float scale = batch.scale;
  // The last kernel writes the output, and its integer form too when a product asks (offerFusion).
  const unsigned tokens = unsigned(batch.tokens), gridY = unsigned(headBlocks);
  const int64_t outElems = batch.tokens * batch.heads * kv.headDim;
  const bool fusable = (blockGroup * kv.headDim) % 32 == 0;
  const int cols = heads * kv.headDim;
  const auto offer = [&](const char* name, const std::function<Command(CUdeviceptr, uint64_t)>& make) {
    const Command c = make(0, 0);
    offerFusion(enqueue(name, c), c, out, outElems,
                [=](CUdeviceptr xq, uint64_t stride, int k) -> std::optional<Command> {
                  if (!fusable || k != cols) return std::nullopt;
                  return make(xq, stride);
                });
  };
  if (split) {
    const CUfunction sf =
        attentionSplitKernel(kv.headDim, blockGroup, kv.pageTokens, kv.precision == KvPrecision::kF16);
    const CUdeviceptr pp = partials_, counters = chunkCounters_;
    if (attentionSpan_ > 0) {
      // A block takes a whole span (maxChunks is a multiple of 8, so of the span) where that still
      // makes enough blocks to keep every multiprocessor busy (spanBlocks_), else a chunk, the fold
      // then going in spans; both give the bits of the one-block kernel (attention.cuh:
      // attention_spans).
      const int64_t spanUnits = int64_t(batch.tokens) * headBlocks * (maxChunks / attentionSpan_);
      const int perBlock = spanUnits >= spanBlocks_ ? attentionSpan_ : 1;
      const int maxUnits = maxChunks / perBlock;
      const unsigned unitsY = gridY * unsigned(maxUnits);
      offer("attention_spans", [=](CUdeviceptr xq, uint64_t stride) {
        return makeLaunch(sf, tokens, unitsY, attentionThreads(kv.headDim), 0, qp, pp, counters, op, heads, kvHeads,
                          scale, posPtr, offPtr, pagesPtr, maxUnits, perBlock, xq, stride, window);
      });
      return;
    }
    const unsigned splitY = gridY * unsigned(maxChunks);
    offer("attention_split", [=](CUdeviceptr xq, uint64_t stride) {
      return makeLaunch(sf, tokens, splitY, attentionThreads(kv.headDim), 0, qp, pp, counters, op, heads, kvHeads,
                        scale, posPtr, offPtr, pagesPtr, maxChunks, xq, stride, window);
    });
    return;
  }
  // Prefill (many blocks, one session): blocks of several tokens over all query heads of a KV
  // head, each K/V tile serving them all - the same bits (attention.cuh: attention_rows). Not once
  // a window has slid: its rows would start at different positions (the one-token kernel below
  // takes those batches, with the same bits).
  const int perBlock = attentionRowTokens_ >= 0 ? attentionRowTokens_ : defaultAttentionRowTokens(kv.headDim);
  const bool rows = perBlock > 0 && !fewBlocks && !slid && tables.size() == 1 && blockGroup == group &&
                    attentionRowsSupported(kv.headDim);
  if (CUfunction rf =
          rows ? attentionRowsKernel(kv.headDim, group, kv.pageTokens, kv.precision == KvPrecision::kF16, perBlock)
               : nullptr) {
    rowAttentions_++;
    const int tokenCount = int(batch.tokens);
    const unsigned gridX = unsigned((batch.tokens + perBlock - 1) / perBlock), kvGrid = unsigned(kvHeads);
    const size_t bytes = attentionRowsSharedBytes(kv.headDim, group, perBlock);
    offer("attention_rows", [=](CUdeviceptr xq, uint64_t stride) {
      return makeLaunch(rf, gridX, kvGrid, unsigned(kAttentionRowThreads), bytes, qp, op, heads, kvHeads, scale, posPtr,
                        offPtr, pagesPtr, xq, stride, tokenCount);
    });
    return;
  }
  // (Looked up only here: attention_rows at 16 tokens a block comes from another module, and this
  // one's compile would be wasted on it.)
  CUfunction f = attentionKernel(kv.headDim, blockGroup, kv.pageTokens, kv.precision == KvPrecision::kF16);
  offer("attention", [=](CUdeviceptr xq, uint64_t stride) {
    return makeLaunch(f, tokens, gridY, attentionThreads(kv.headDim), 0, qp, op, heads, kvHeads, scale, posPtr, offPtr,
                      pagesPtr, xq, stride, window);
  });
}

void CudaDevice::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n == 0) return;
  requireOwned(gate, size_t(n) * 4, "swiglu gate");
  requireOwned(up, size_t(n) * 4, "swiglu up");
  requireOwned(out, size_t(n) * 4, "swiglu output");
  makeCurrent();
  gatedActivation("swiglu", elementwise().swiglu, gate, up, out, n);
}

void CudaDevice::geglu(const float* gate, const float* up, float* out, int64_t n) {
  if (n == 0) return;
  requireOwned(gate, size_t(n) * 4, "geglu gate");
  requireOwned(up, size_t(n) * 4, "geglu up");
  requireOwned(out, size_t(n) * 4, "geglu output");
  makeCurrent();
  gatedActivation("geglu", elementwise().geglu, gate, up, out, n);
}

void CudaDevice::gatedActivation(const char* op, CUfunction f, const float* gate, const float* up, float* out,
                                 int64_t n) {
  CUdeviceptr gp = dptr(gate), up2 = dptr(up), op2 = dptr(out);
  int64_t count = n;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(multiprocessors_) * 16);
  const Command c = makeLaunch(f, unsigned(blocks), 1, 256, 0, gp, up2, op2, count, CUdeviceptr(0), uint64_t(0), 0);
  offerFusion(enqueue(op, c), c, out, n, [=](CUdeviceptr xq, uint64_t stride, int k) -> std::optional<Command> {
    if (k % 32 != 0 || count % k != 0) return std::nullopt;
    return makeLaunch(f, unsigned(blocks), 1, 256, 0, gp, up2, op2, count, xq, stride, k);
  });
}

void CudaDevice::add(float* x, const float* y, int64_t n) {
  if (n == 0) return;
  requireOwned(x, size_t(n) * 4, "add destination");
  requireOwned(y, size_t(n) * 4, "add source");
  makeCurrent();
  CUdeviceptr xp = dptr(x), yp = dptr(y);
  int64_t count = n;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(multiprocessors_) * 16);
  const Command c = makeLaunch(elementwise().add, unsigned(blocks), 1, 256, 0, xp, yp, count);
  const size_t index = enqueue("add", c);
  if (index != kNotQueued) lastAdd_ = {index, c, x, y, n};  // an rmsNorm of x next takes it over
}

void CudaDevice::scale(float* x, float s, int64_t n) {
  if (n == 0) return;
  requireOwned(x, size_t(n) * 4, "scale destination");
  makeCurrent();
  CUdeviceptr xp = dptr(x);
  int64_t count = n;
  float factor = s;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(multiprocessors_) * 16);
  enqueue("scale", makeLaunch(elementwise().scale, unsigned(blocks), 1, 256, 0, xp, factor, count));
}

// ---- kernels made ahead ----

namespace {
// Token counts whose kernel choices stand for every count up to `maxTokens`: each count to 64
// (the per-warp and tensor-core block choices change below that), then powers of two and the most.
std::vector<int64_t> representativeTokenCounts(int64_t maxTokens) {
  std::vector<int64_t> counts;
  for (int64_t t = 1; t <= std::min<int64_t>(maxTokens, 64); t++) counts.push_back(t);
  for (int64_t t = 128; t < maxTokens; t *= 2) counts.push_back(t);
  if (maxTokens > 64) counts.push_back(maxTokens);
  return counts;
}
}  // namespace

size_t CudaDevice::prepareKernels(const KernelWorkload& workload) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ModuleSpec> wanted;
  std::set<std::string> keys;
  auto want = [&](const ModuleSpec& given) {
    ModuleSpec spec = tuned(given);
    std::string key = spec.key();
    if (!modules_.count(key) && keys.insert(std::move(key)).second) wanted.push_back(std::move(spec));
  };
  const auto align = [](const WeightRef& w) {
    return commonAlignment(reinterpret_cast<uintptr_t>(w.data), w.rowStride);
  };
  // The same choices the ops make (matmul, matmuls, matmulInteger, getRows, attention).
  auto product = [&](const WeightRef& w, int64_t tokens) {
    if (!cudaSupportsWeightType(w.type) || w.rows <= 0) return;
    if (integerMatmul_ && cudaIntegerMatmulType(w.type, w.cols)) {
      const IntProduct c = intProduct(w, align(w), tokens);
      want(intMatmulModule(w.type, w.cols, align(w), c.tokens, c.rows, c.mma, c.rowWarps));
      return;
    }
    want(matmulModule(w.type, w.cols, align(w), w.cols % 4 == 0, warpTokens(tokens)));
  };
  const std::vector<int64_t> counts = representativeTokenCounts(std::max<int64_t>(1, workload.maxTokens));
  for (const auto& ws : workload.products) {
    for (int64_t t : counts) {
      if (groupable(ws, t)) {
        int a = 16;
        const auto parts = groupedParts(ws, t, a);
        want(intMatmulGroupModule(parts, ws[0].cols, a, groupWarpTokens(t)));
        // A step with prompt rows runs them one by one (matmuls), its decode rows on these.
        if (!promptGemm_) continue;
      }
      for (const WeightRef& w : ws) product(w, t);
    }
    // Prompt rows (setPromptRows): gemm_f16 at every block height a product's shape can choose.
    for (const WeightRef& w : ws) {
      if (!promptMatrix(w)) continue;
      std::set<int> heights;  // the choice changes with the tiles of 128 tokens only
      for (int64_t t = 128; t < workload.maxTokens + 128; t += 128) heights.insert(promptBlockRows(w.rows, t));
      for (int h : heights) want(promptGemmModule(w.type, w.cols, align(w), h, promptSlice(w.cols)));
    }
  }
  for (const WeightRef& table : workload.tables) {
    if (cudaSupportsWeightType(table.type))
      want(matmulModule(table.type, table.cols, align(table), table.cols % 4 == 0, 0));
  }
  for (const auto& a : workload.attention) {
    const KvLayout& kv = a.kv;
    if (kv.kvHeads <= 0 || a.heads % kv.kvHeads != 0) continue;
    const int group = a.heads / kv.kvHeads;
    const bool f16 = kv.precision == KvPrecision::kF16;
    want(attentionModule(kv.headDim, group, kv.pageTokens, f16, attentionSpan_));
    // Decode (few blocks): a block per query head.
    if (attentionPerHead_ && kv.kvHeads < multiprocessors_ && (kv.headDim % 32 == 0 || (group * kv.headDim) % 32 != 0))
      want(attentionModule(kv.headDim, 1, kv.pageTokens, f16, attentionSpan_));
    // Prefill of one session (many blocks): attention_rows.
    const int perBlock = attentionRowTokens_ >= 0 ? attentionRowTokens_ : defaultAttentionRowTokens(kv.headDim);
    if (perBlock > 0 && attentionRowsSupported(kv.headDim) && workload.maxTokens * kv.kvHeads >= multiprocessors_ &&
        attentionRowsSharedBytes(kv.headDim, group, perBlock) <= size_t(maxSharedOptIn_))
      want(attentionModule(kv.headDim, group, kv.pageTokens, f16, attentionSpan_, perBlock));
  }
  if (workload.elementwise || !workload.products.empty()) want(elementwiseModule());
  if (workload.candidates) want(samplingModule());
  if (blockKernels_ && !workload.attention.empty()) want(blocksModule());

  // Compiled (or read from the disk cache) on a thread per core; NVRTC programs are per call.
  struct Made {
    std::vector<char> image;
    bool compiled = false;
    std::optional<Error> error;
  };
  std::vector<Made> made(wanted.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < wanted.size();) {
      try {
        made[i].image = moduleImage(wanted[i], made[i].compiled);
      } catch (const Error& e) {
        made[i].error = e;
      }
    }
  };
  const size_t threads = std::min<size_t>(wanted.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; t++) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < wanted.size(); i++) {
    // A failed one: the op that needs it compiles it again and reports the error then.
    if (!made[i].error) loadModule(wanted[i].key(), made[i].image, made[i].compiled);
  }
  modulesPrepared_ += wanted.size();
  prepared_ = true;
  prepareSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return wanted.size();
}

}  // namespace jitllm::cuda
