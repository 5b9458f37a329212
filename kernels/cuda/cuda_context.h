// One GPU as every part of a CudaDevice sees it: the driver table, the retained primary context,
// the stream on which every op and copy runs in call order, and the attributes the parts plan
// with (architecture, multiprocessors, shared memory).
//
// Ownership: owns the context's retain and the stream, given back last (CudaDevice declares it
// before its parts, which borrow it). Thread-safety: immutable once made; check() and
// makeCurrent() from any thread.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/driver_api.h"

namespace jitllm::cuda {

// Allocations are rounded to this; cuMemAlloc aligns at least as much, so every buffer start is
// aligned for 16-byte loads. Staged op descriptions are rounded alike.
inline constexpr size_t kAllocationGranule = 256;

inline size_t roundUp(size_t n, size_t granule) { return (n + granule - 1) / granule * granule; }

// A pointer of the Device interface (device memory) as the driver takes it.
inline CUdeviceptr dptr(const void* p) { return CUdeviceptr(reinterpret_cast<uintptr_t>(p)); }

// The largest power of two, up to 16, dividing every one of the values.
inline int commonAlignment(uint64_t a, uint64_t b) {
  const uint64_t both = a | b | 16;
  return int(both & (~both + 1));
}

class CudaContext final {
 public:
  // Retains GPU `index`'s primary context, makes it current, reads its attributes and creates the
  // stream.
  CudaContext(const DriverApi& api, int index);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Throws the Error of a failed call (driver_api.h), naming this device.
  void check(CUresult r, const char* what) const { cuda::check(api, r, what, id); }
  // The context is made current on entry to every method, so the executor thread may change.
  void makeCurrent() const { check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent"); }
  // Waits for everything submitted to the stream so far.
  void synchronize() const { check(api.cuStreamSynchronize(stream), "cuStreamSynchronize"); }

  const DriverApi& api;
  const std::string id;  // "cuda:0", for messages
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  int arch = 0;  // 90 for sm_90
  int multiprocessors = 0;
  int maxSharedOptIn = 0;  // dynamic shared memory a kernel may opt in to (bytes)
};

}  // namespace jitllm::cuda
