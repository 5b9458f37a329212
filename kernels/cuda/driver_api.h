// The CUDA driver API, opened at run time (dlopen of libcuda.so.1) rather than linked.
//
// Linking libcuda would make every jitllm binary fail to start on a machine without NVIDIA's
// driver; opening it lazily lets such a machine simply have no cuda:N devices, with one log line
// saying why. The function pointers carry the exact prototypes of <cuda.h> (the versioned entry
// points its macros select, e.g. cuMemAlloc_v2).
//
// Thread-safety: driverApi() may be called from any thread; the table is immutable once made.
#pragma once

#include <cuda.h>

#include <string>

namespace jitllm::cuda {

struct DriverApi {
#define JITLLM_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                             \
  X(cuDriverGetVersion)                 \
  X(cuGetErrorName)                     \
  X(cuGetErrorString)                   \
  X(cuDeviceGetCount)                   \
  X(cuDeviceGet)                        \
  X(cuDeviceGetName)                    \
  X(cuDeviceGetAttribute)               \
  X(cuDeviceTotalMem)                   \
  X(cuDeviceGetUuid)                    \
  X(cuDevicePrimaryCtxRetain)           \
  X(cuDevicePrimaryCtxRelease)          \
  X(cuCtxSetCurrent)                    \
  X(cuCtxGetCurrent)                    \
  X(cuStreamCreate)                     \
  X(cuStreamDestroy)                    \
  X(cuStreamSynchronize)                \
  X(cuEventCreate)                      \
  X(cuEventDestroy)                     \
  X(cuEventRecord)                      \
  X(cuEventSynchronize)                 \
  X(cuStreamWaitEvent)                  \
  X(cuEventElapsedTime)                 \
  X(cuMemGetInfo)                       \
  X(cuMemAlloc)                         \
  X(cuMemFree)                          \
  X(cuMemHostAlloc)                     \
  X(cuMemFreeHost)                      \
  X(cuMemcpyHtoDAsync)                  \
  X(cuMemcpyDtoHAsync)                  \
  X(cuMemcpyDtoDAsync)                  \
  X(cuMemcpyPeerAsync)                  \
  X(cuDeviceCanAccessPeer)              \
  X(cuCtxEnablePeerAccess)              \
  X(cuMemsetD32Async)                   \
  X(cuModuleLoadData)                   \
  X(cuModuleUnload)                     \
  X(cuModuleGetFunction)                \
  X(cuFuncSetAttribute)                 \
  X(cuLaunchKernel)                     \
  X(cuStreamBeginCapture)               \
  X(cuStreamEndCapture)                 \
  X(cuGraphInstantiateWithFlags)        \
  X(cuGraphLaunch)                      \
  X(cuGraphExecDestroy)                 \
  X(cuGraphDestroy)

// Entry points a driver may lack without losing the device: null then, and the callers fall back
// (cuLaunchKernelEx, CUDA 12.0: programmatic dependent launch; else cuLaunchKernel).
#define JITLLM_CUDA_OPTIONAL_FUNCTIONS(X) X(cuLaunchKernelEx)

#define JITLLM_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  JITLLM_CUDA_DRIVER_FUNCTIONS(JITLLM_CUDA_DECLARE)
  JITLLM_CUDA_OPTIONAL_FUNCTIONS(JITLLM_CUDA_DECLARE)
#undef JITLLM_CUDA_DECLARE

  int driverVersion = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor
};

// The driver, loaded and initialised (cuInit) on first use; nullptr when this machine has none,
// and then driverUnavailableReason() says why ("libcuda.so.1 not found", "cuInit: no CUDA-capable
// device is detected", ...). The first failure is logged once to stderr.
const DriverApi* driverApi();
std::string driverUnavailableReason();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
std::string describe(const DriverApi& api, CUresult result);

// Throws jitllm::Error for a failed call: OVERLOADED for out-of-memory, DISCONNECTED for errors
// that leave the context unusable (a fault in a kernel, a lost device), FAILED otherwise.
void check(const DriverApi& api, CUresult result, const char* what, const std::string& device);

}  // namespace jitllm::cuda
