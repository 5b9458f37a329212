// The pinned ring in which ops stage the small host-side descriptions they bring (token ids,
// positions, page tables, block addresses) and its mirror in device memory, which the op queue
// fills by copies queued ahead of the kernels that read it. Two halves, each released by an
// event once the copies out of it ran.
//
// The ring starts over at each step's read-back (restart()), so a step stages at the same
// addresses as the one before and its queue can match that one's graph. The op queue decides
// when the ring may grow or change halves (after running what reads it): CudaOpQueue::stage.
//
// Ownership: owns the pinned host memory, the device mirror and the two events; borrows the
// context. Thread-safety: the executor thread; isStagedCopy() also from a flush on another thread
// (the ring is only reallocated after a flush, under the executor).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_context.h"

namespace jitllm::cuda {

class StagingRing final {
 public:
  // Host bytes staged for one op: written at `host`, readable by kernels at `device` once the
  // copy from the ring (CudaOpQueue::commit) has been queued.
  struct Staged {
    uint8_t* host;
    CUdeviceptr device;
    size_t bytes;
  };

  explicit StagingRing(const CudaContext& ctx);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Whether `bytes` fit in one half (larger descriptions - a huge batch - need a larger ring).
  bool holds(size_t bytes) const { return bytes <= bytes_ / 2; }
  // A ring of twice `bytes` (rounded to 1 MiB): nothing queued may read the old one any more.
  void grow(size_t bytes);
  // Whether `bytes` still fit in the current half.
  bool fitsInHalf(size_t bytes) const { return offset_ + bytes <= size_t(half_ + 1) * (bytes_ / 2); }
  // Marks the current half released once the copies queued from it ran (they have been
  // submitted), then enters the other half once the copies queued out of it earlier ran.
  void enterOtherHalf();
  // The next `bytes` (a multiple of kAllocationGranule that fits in the current half).
  Staged take(size_t bytes) {
    Staged s{host_ + offset_, device_ + offset_, bytes};
    offset_ += bytes;
    return s;
  }
  // Everything staged has run: the next step stages from the start again.
  void restart() {
    offset_ = 0;
    half_ = 0;
  }
  // Whether a copy command copies ring bytes to their mirror (what commit() queues).
  bool isMirrorCopy(CUdeviceptr to, const uint8_t* from) const { return to == device_ + CUdeviceptr(from - host_); }
  uint8_t* host() const { return host_; }
  CUdeviceptr device() const { return device_; }

 private:
  void allocate(size_t bytes);
  void free();

  // The ring's size at first; it grows for a description larger than half of it.
  static constexpr size_t kInitialBytes = size_t(4) << 20;

  const CudaContext& ctx_;
  uint8_t* host_ = nullptr;
  CUdeviceptr device_ = 0;
  size_t bytes_ = 0;
  size_t offset_ = 0;
  int half_ = 0;
  std::array<CUevent, 2> events_{};
};

}  // namespace jitllm::cuda
