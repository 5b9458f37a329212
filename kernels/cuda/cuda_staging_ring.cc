#include "kernels/cuda/cuda_staging_ring.h"

namespace jitllm::cuda {

StagingRing::StagingRing(const CudaContext& ctx) : ctx_(ctx) {
  for (auto& e : events_) ctx_.check(ctx_.api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  allocate(kInitialBytes);
}

StagingRing::~StagingRing() {
  free();
  for (auto e : events_) {
    if (e) ctx_.api.cuEventDestroy(e);
  }
}

void StagingRing::allocate(size_t bytes) {
  bytes_ = bytes;
  ctx_.check(ctx_.api.cuMemHostAlloc(reinterpret_cast<void**>(&host_), bytes_, 0), "cuMemHostAlloc");
  ctx_.check(ctx_.api.cuMemAlloc(&device_, bytes_), "cuMemAlloc (staging ring)");
  offset_ = 0;
  half_ = 0;
}

void StagingRing::free() {
  if (device_) ctx_.api.cuMemFree(device_);
  if (host_) ctx_.api.cuMemFreeHost(host_);
  device_ = 0;
  host_ = nullptr;
}

void StagingRing::grow(size_t bytes) {
  free();
  allocate(roundUp(bytes * 2, size_t(1) << 20));
}

void StagingRing::enterOtherHalf() {
  ctx_.check(ctx_.api.cuEventRecord(events_[size_t(half_)], ctx_.stream), "cuEventRecord");
  half_ ^= 1;
  offset_ = size_t(half_) * (bytes_ / 2);
  // The copies out of the half we enter were queued before its event: wait until they ran.
  ctx_.check(ctx_.api.cuEventSynchronize(events_[size_t(half_)]), "cuEventSynchronize");
}

}  // namespace jitllm::cuda
