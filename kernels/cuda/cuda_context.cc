#include "kernels/cuda/cuda_context.h"

namespace jitllm::cuda {

CudaContext::CudaContext(const DriverApi& driver, int index) : api(driver), id("cuda:" + std::to_string(index)) {
  check(api.cuDeviceGet(&device, index), "cuDeviceGet");
  check(api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  makeCurrent();
  int major = 0, minor = 0;
  check(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "attribute");
  check(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "attribute");
  check(api.cuDeviceGetAttribute(&multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "attribute");
  arch = major * 10 + minor;
  check(api.cuDeviceGetAttribute(&maxSharedOptIn, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
        "cuDeviceGetAttribute");
  check(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

CudaContext::~CudaContext() {
  if (stream) api.cuStreamDestroy(stream);
  if (context) api.cuDevicePrimaryCtxRelease(device);
}

}  // namespace jitllm::cuda
