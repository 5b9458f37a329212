// Device memory of one CUDA device and the ways bytes reach it:
// - buffers (cuMemAlloc in kAllocationGranule steps under the Device's budget), each known by its
//   range so every pointer an op or copy is given can be checked (requireOwned);
// - scratch buffers the ops grow as batches and contexts grow (ScratchBuffer), charged to the
//   budget without refusing;
// - host copies: small ones through the op queue's staging ring (so they can be part of a
//   graph), large ones through two pinned buffers in turn, a copy overlapping the next memcpy;
//   a step's read-back, which ends the step;
// - streamed weights: copies on a stream of their own from pinned sources, ordered against the
//   ops by events (Device::markOps, uploadAsync, waitForUpload).
//
// A free, or a scratch buffer growing, first runs and waits for the queue and drops the captured
// graphs, which may name the memory.
//
// Ownership: owns the pinned buffers, the copy stream and its events; the buffers it hands out
// must be destroyed before it; borrows the context, the op queue, the profiler and the budget.
// Thread-safety: the executor thread, but for requireOwned() and the release of a buffer, which
// any thread may do (the allocation map has its own lock).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_op_queue.h"
#include "kernels/cuda/cuda_profiler.h"
#include "kernels/device.h"

namespace jitllm::cuda {

// The Device's byte budget (protected there), lent to the part that takes device memory.
class MemoryBudget {
 public:
  // Throws Error(OVERLOADED) past the budget.
  virtual void reserve(size_t bytes) = 0;
  virtual void release(size_t bytes) noexcept = 0;
  // Counts memory an op must have to run at all, without refusing it.
  virtual void charge(size_t bytes) noexcept = 0;

 protected:
  ~MemoryBudget() = default;
};

// Device memory an op needs as it runs (integer and fp16 forms of activations, attention's
// partial states, gathered blocks, ...): grown by CudaMemory::grow, freed with its owner, which
// the CudaContext outlives.
class ScratchBuffer final {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer() {
    if (ptr_) api_->cuMemFree(ptr_);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  friend class CudaMemory;
  const DriverApi* api_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

class CudaMemory final {
 public:
  CudaMemory(const CudaContext& ctx, CudaOpQueue& queue, CudaProfiler& profiler, MemoryBudget& budget);
  ~CudaMemory();
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  // A buffer of `owner` (the device this memory is part of); OVERLOADED past the budget or when
  // the GPU itself is out.
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes, Device& owner);
  // Throws FAILED unless [p, p + bytes) lies inside one buffer of this device.
  void requireOwned(const void* p, size_t bytes, const char* what) const;
  // Grows `scratch` to `need` bytes (rounded up to 1 MiB) after the queued work ran; false when
  // it was large enough. Its old contents are gone.
  bool grow(ScratchBuffer& scratch, size_t need, const char* what) {
    if (need <= scratch.bytes_) return false;
    regrow(scratch, need, what);
    return true;
  }

  void copyFromHost(uint8_t* dst, const void* src, size_t bytes);
  void copyToHost(void* dst, const uint8_t* src, size_t bytes);
  // Host memory to device memory and back through the two pinned buffers, chunk by chunk; both run
  // the queue first. The download returns when dst holds every byte.
  void upload(CUdeviceptr dst, const void* src, size_t bytes);
  void download(void* dst, CUdeviceptr src, size_t bytes);
  // A step's read-back: flush, wait, copy into dst through the pinned buffers; then, everything
  // having run, the staging ring and the early-submit parts start over so that the next step's
  // queue can match this one's graph. Every copy that ends a step goes through here.
  void readBack(void* dst, CUdeviceptr src, size_t bytes);

  // Streaming weights (Device's contract).
  std::unique_ptr<HostBuffer> allocateStreamSource(size_t bytes);
  uint64_t markOps();
  uint64_t uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t afterMark);
  void waitForUpload(uint64_t upload);

 private:
  friend class CudaBuffer;
  // A buffer goes: the queued work that may use it runs first, graphs that name it go.
  void release(CUdeviceptr ptr, size_t bytes);
  void regrow(ScratchBuffer& scratch, size_t need, const char* what);

  // Large uploads go through two pinned buffers in turn, so a copy overlaps the next memcpy.
  static constexpr size_t kStagingBytes = size_t(8) << 20;
  // Streaming weights: tickets count up; ticket t uses event (t - 1) % kStreamEvents, which is
  // free again long before it comes round (a model streams through two slots, so a handful are
  // ever in flight).
  static constexpr size_t kStreamEvents = 64;

  const CudaContext& ctx_;
  CudaOpQueue& queue_;
  CudaProfiler& profiler_;
  MemoryBudget& budget_;

  mutable std::mutex allocationsMutex_;
  std::map<uintptr_t, size_t> allocations_;  // base address -> bytes

  std::array<uint8_t*, 2> staging_{};
  std::array<CUevent, 2> stagingEvents_{};

  CUstream copyStream_ = nullptr;
  std::array<CUevent, kStreamEvents> markEvents_{}, uploadEvents_{};
  uint64_t marks_ = 0, uploads_ = 0;
};

}  // namespace jitllm::cuda
