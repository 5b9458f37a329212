#include "kernels/cuda/cuda_memory.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.h"

namespace jitllm::cuda {

// Copies up to this size go straight from pageable memory (the driver stages them itself);
// larger ones through our pinned buffers.
static constexpr size_t kDirectCopyBytes = size_t(256) << 10;

class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(Device& device, CudaMemory& memory, CUdeviceptr ptr, size_t size)
      : device_(device), memory_(memory), ptr_(ptr), size_(size) {}
  ~CudaBuffer() override { memory_.release(ptr_, size_); }
  size_t size() const override { return size_; }
  uint8_t* data() override { return reinterpret_cast<uint8_t*>(ptr_); }
  Device& device() override { return device_; }

 private:
  Device& device_;
  CudaMemory& memory_;
  CUdeviceptr ptr_;
  size_t size_;
};

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

CudaMemory::CudaMemory(const CudaContext& ctx, CudaOpQueue& queue, CudaProfiler& profiler, MemoryBudget& budget)
    : ctx_(ctx), queue_(queue), profiler_(profiler), budget_(budget) {
  const DriverApi& api = ctx_.api;
  for (auto& e : stagingEvents_) ctx_.check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  ctx_.check(api.cuStreamCreate(&copyStream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (copies)");
  for (auto& e : markEvents_) ctx_.check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (auto& e : uploadEvents_) ctx_.check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (auto& s : staging_) {
    ctx_.check(api.cuMemHostAlloc(reinterpret_cast<void**>(&s), kStagingBytes, 0), "cuMemHostAlloc");
  }
}

CudaMemory::~CudaMemory() {
  const DriverApi& api = ctx_.api;
  for (auto* s : staging_) {
    if (s) api.cuMemFreeHost(s);
  }
  for (auto e : stagingEvents_) {
    if (e) api.cuEventDestroy(e);
  }
  if (copyStream_) api.cuStreamSynchronize(copyStream_);
  for (auto e : markEvents_) {
    if (e) api.cuEventDestroy(e);
  }
  for (auto e : uploadEvents_) {
    if (e) api.cuEventDestroy(e);
  }
  if (copyStream_) api.cuStreamDestroy(copyStream_);
}

// ---- buffers ----

std::unique_ptr<DeviceBuffer> CudaMemory::allocate(size_t bytes, Device& owner) {
  const size_t rounded = roundUp(std::max<size_t>(bytes, 1), kAllocationGranule);
  budget_.reserve(rounded);
  ctx_.makeCurrent();
  CUdeviceptr ptr = 0;
  const CUresult r = ctx_.api.cuMemAlloc(&ptr, rounded);
  if (r != CUDA_SUCCESS) {
    budget_.release(rounded);
    ctx_.check(r, "cuMemAlloc");  // OUT_OF_MEMORY becomes OVERLOADED
  }
  {
    std::lock_guard lock(allocationsMutex_);
    allocations_[uintptr_t(ptr)] = rounded;
  }
  return std::make_unique<CudaBuffer>(owner, *this, ptr, rounded);
}

void CudaMemory::release(CUdeviceptr ptr, size_t bytes) {
  {
    std::lock_guard lock(allocationsMutex_);
    allocations_.erase(uintptr_t(ptr));
  }
  // Kernels queued earlier may still read the memory: submit and wait for them (frees are rare -
  // a workspace growing, a session's KV chunk, a unit moving away). A graph may hold the address
  // too: graphs go with it.
  try {
    queue_.flush();
  } catch (const Error&) {
    // A dead device: nothing will run any more; the memory goes below all the same.
  }
  queue_.dropGraphs();
  if (ctx_.api.cuCtxSetCurrent(ctx_.context) == CUDA_SUCCESS) {
    ctx_.api.cuStreamSynchronize(ctx_.stream);
    ctx_.api.cuMemFree(ptr);
  }
  budget_.release(bytes);
}

void CudaMemory::requireOwned(const void* p, size_t bytes, const char* what) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(allocationsMutex_);
  auto it = allocations_.upper_bound(a);
  bool ok = it != allocations_.begin();
  if (ok) {
    --it;
    ok = a >= it->first && bytes <= it->second && a - it->first <= it->second - bytes;
  }
  JITLLM_REQUIRE(ok, ctx_.id, ": ", what, " (", bytes, " bytes at ", p, ") is not memory of this device");
}

void CudaMemory::regrow(ScratchBuffer& scratch, size_t need, const char* what) {
  // Queued kernels may still use the old buffer: run them first (growth is rare - the first op of
  // each larger batch or context), and graphs that name it go too.
  queue_.flush();
  ctx_.synchronize();
  queue_.dropGraphs();
  if (scratch.ptr_) {
    ctx_.api.cuMemFree(scratch.ptr_);
    budget_.release(scratch.bytes_);
    scratch.ptr_ = 0;
    scratch.bytes_ = 0;
  }
  const size_t rounded = (need + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
  ctx_.check(ctx_.api.cuMemAlloc(&scratch.ptr_, rounded), what);
  scratch.api_ = &ctx_.api;
  scratch.bytes_ = rounded;
  budget_.charge(rounded);
}

// ---- host copies ----

void CudaMemory::copyFromHost(uint8_t* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  requireOwned(dst, bytes, "copy destination");
  ctx_.makeCurrent();
  if (bytes <= kDirectCopyBytes) {
    // Small copies (a hidden state crossing devices) go through the ring like op descriptions,
    // so they can be part of a graph.
    CudaOpQueue::Staged s = queue_.stage(bytes);
    std::memcpy(s.host, src, bytes);
    Command c;
    c.copyTo = dptr(dst);
    c.copyFrom = s.host;
    c.copyBytes = bytes;
    queue_.enqueue("copy", c);
    return;
  }
  upload(dptr(dst), src, bytes);
}

void CudaMemory::copyToHost(void* dst, const uint8_t* src, size_t bytes) {
  if (bytes == 0) return;
  requireOwned(src, bytes, "copy source");
  readBack(dst, dptr(src), bytes);
}

void CudaMemory::upload(CUdeviceptr dst, const void* src, size_t bytes) {
  queue_.flush();
  queue_.fusion().forgetHeldInputs();
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t done = 0, turn = 0; done < bytes; turn ^= 1) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    ctx_.check(ctx_.api.cuEventSynchronize(stagingEvents_[turn]), "cuEventSynchronize");  // its last copy ran
    std::memcpy(staging_[turn], from + done, n);
    ctx_.check(ctx_.api.cuMemcpyHtoDAsync(dst + done, staging_[turn], n, ctx_.stream), "cuMemcpyHtoDAsync");
    ctx_.check(ctx_.api.cuEventRecord(stagingEvents_[turn], ctx_.stream), "cuEventRecord");
    done += n;
  }
}

void CudaMemory::download(void* dst, CUdeviceptr src, size_t bytes) {
  queue_.flush();
  auto* out = static_cast<uint8_t*>(dst);
  // Chunk k's copy into pinned buffer k % 2 runs while the host moves chunk k - 1 out of the other.
  size_t waiting = 0, waitingBytes = 0;
  int waitingTurn = -1;
  const auto drain = [&] {
    if (waitingTurn < 0) return;
    ctx_.check(ctx_.api.cuEventSynchronize(stagingEvents_[size_t(waitingTurn)]), "cuEventSynchronize");
    std::memcpy(out + waiting, staging_[size_t(waitingTurn)], waitingBytes);
    waitingTurn = -1;
  };
  for (size_t done = 0, turn = 0; done < bytes; turn ^= 1) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    ctx_.check(ctx_.api.cuEventSynchronize(stagingEvents_[turn]), "cuEventSynchronize");  // its last copy ran
    ctx_.check(ctx_.api.cuMemcpyDtoHAsync(staging_[turn], src + done, n, ctx_.stream), "cuMemcpyDtoHAsync");
    ctx_.check(ctx_.api.cuEventRecord(stagingEvents_[turn], ctx_.stream), "cuEventRecord");
    drain();
    waiting = done, waitingBytes = n, waitingTurn = int(turn);
    done += n;
  }
  drain();
}

void CudaMemory::readBack(void* dst, CUdeviceptr src, size_t bytes) {
  const auto flushStart = CudaProfiler::Clock::now();
  queue_.flush();
  ctx_.makeCurrent();
  if (profiler_.graphs()) [[unlikely]] {
    profiler_.readBackFlushed(flushStart);
  }
  const auto copyStart = CudaProfiler::Clock::now();
  // Through the pinned buffers: a step's logits (the 1B's 513 KB) arrive in 52 us this way
  // against 134 us copied straight into pageable memory (H200, docs/cuda.md).
  download(dst, src, bytes);
  if (profiler_.graphs()) [[unlikely]] {
    profiler_.readBackCopied(copyStart);
  }
  if (profiler_.any()) profiler_.collect();
  // Everything ran: the next step stages at the same addresses as this one and its queue can
  // match a graph; its parts are cut where this step's were.
  queue_.stepEnded();
}

// ---- streamed weights ----

std::unique_ptr<HostBuffer> CudaMemory::allocateStreamSource(size_t bytes) {
  ctx_.makeCurrent();
  void* p = nullptr;
  ctx_.check(ctx_.api.cuMemHostAlloc(&p, std::max<size_t>(bytes, 1), 0), "cuMemHostAlloc (stream source)");
  return std::make_unique<PinnedHostBuffer>(ctx_.api, static_cast<uint8_t*>(p), bytes);
}

uint64_t CudaMemory::markOps() {
  queue_.flush();  // the mark comes after every op queued so far
  ctx_.makeCurrent();
  const uint64_t ticket = ++marks_;
  ctx_.check(ctx_.api.cuEventRecord(markEvents_[(ticket - 1) % kStreamEvents], ctx_.stream), "cuEventRecord (mark)");
  return ticket;
}

uint64_t CudaMemory::uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t afterMark) {
  requireOwned(dst, bytes, "upload destination");
  ctx_.makeCurrent();
  if (afterMark != 0) {
    ctx_.check(ctx_.api.cuStreamWaitEvent(copyStream_, markEvents_[(afterMark - 1) % kStreamEvents], 0),
               "cuStreamWaitEvent");
  }
  ctx_.check(ctx_.api.cuMemcpyHtoDAsync(dptr(dst), src, bytes, copyStream_), "cuMemcpyHtoDAsync (stream)");
  const uint64_t ticket = ++uploads_;
  ctx_.check(ctx_.api.cuEventRecord(uploadEvents_[(ticket - 1) % kStreamEvents], copyStream_),
             "cuEventRecord (upload)");
  return ticket;
}

void CudaMemory::waitForUpload(uint64_t upload) {
  if (upload == 0) return;
  queue_.flush();
  ctx_.makeCurrent();
  ctx_.check(ctx_.api.cuStreamWaitEvent(ctx_.stream, uploadEvents_[(upload - 1) % kStreamEvents], 0),
             "cuStreamWaitEvent");
}

}  // namespace jitllm::cuda
