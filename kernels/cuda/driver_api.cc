#include "kernels/cuda/driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

#include "base/error.h"

namespace jitllm::cuda {
namespace {

#define JITLLM_STRINGIFY2(x) #x
#define JITLLM_STRINGIFY(x) JITLLM_STRINGIFY2(x)

struct LoadedDriver {
  DriverApi api;
  bool ok = false;
  std::string reason;
};

LoadedDriver load() {
  LoadedDriver d;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    d.reason = std::string("the NVIDIA driver library libcuda.so.1 was not found (") + ::dlerror() + ")";
    return d;
  }
  // The names as <cuda.h>'s macros spell them (cuMemAlloc -> cuMemAlloc_v2), so each pointer is the
  // entry point whose prototype decltype took.
#define JITLLM_CUDA_LOAD(name)                                                                    \
  d.api.name = reinterpret_cast<decltype(&::name)>(::dlsym(lib, JITLLM_STRINGIFY(name)));         \
  if (d.api.name == nullptr) {                                                                    \
    d.reason = std::string("libcuda.so.1 lacks ") + JITLLM_STRINGIFY(name) + " (driver too old)"; \
    return d;                                                                                     \
  }
  JITLLM_CUDA_DRIVER_FUNCTIONS(JITLLM_CUDA_LOAD)
#undef JITLLM_CUDA_LOAD
#define JITLLM_CUDA_LOAD_OPTIONAL(name) \
  d.api.name = reinterpret_cast<decltype(&::name)>(::dlsym(lib, JITLLM_STRINGIFY(name)));
  JITLLM_CUDA_OPTIONAL_FUNCTIONS(JITLLM_CUDA_LOAD_OPTIONAL)
#undef JITLLM_CUDA_LOAD_OPTIONAL
  const CUresult init = d.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    d.reason = "cuInit failed: " + describe(d.api, init);
    return d;
  }
  d.api.cuDriverGetVersion(&d.api.driverVersion);
  d.ok = true;
  return d;
}

const LoadedDriver& loaded() {
  static const LoadedDriver driver = [] {
    LoadedDriver d = load();
    if (!d.ok) std::fprintf(stderr, "jitllm: no CUDA devices: %s\n", d.reason.c_str());
    return d;
  }();
  return driver;
}

}  // namespace

const DriverApi* driverApi() { return loaded().ok ? &loaded().api : nullptr; }
std::string driverUnavailableReason() { return loaded().ok ? std::string() : loaded().reason; }

std::string describe(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(result, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(int(result))) + " (" + (text ? text : "?") + ")";
}

void check(const DriverApi& api, CUresult result, const char* what, const std::string& device) {
  if (result == CUDA_SUCCESS) [[likely]]
    return;
  const std::string message = device + ": " + what + ": " + describe(api, result);
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      throwError(ErrorKind::kOverloaded, message);
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_SYSTEM_NOT_READY:
      throwError(ErrorKind::kDisconnected, message);
    default:
      throwError(ErrorKind::kFailed, message);
  }
}

}  // namespace jitllm::cuda
