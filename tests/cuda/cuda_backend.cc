// The CUDA test binary's backend, for the shared GPU suites (tests/gpu).
#include "tests/cuda/cuda_test_support.h"
#include "tests/gpu/gpu_model_tests.h"

namespace jitllm::testing {

const GpuBackend& testedBackend() {
  static const GpuBackend backend{
      "cuda", &cuda::CudaDevice::unavailableReason,
      [](int index) -> std::unique_ptr<Device> { return makeCudaDevice(index); },
      []() { return cuda::CudaDevice::unavailableReason().empty() ? cuda::CudaDevice::count() : 0; }};
  return backend;
}

INSTANTIATE_TEST_SUITE_P(Cuda, GpuModels, ::testing::Values(0));
INSTANTIATE_TEST_SUITE_P(Cuda, GpuTinyModels, kGpuTinyMixes);

}  // namespace jitllm::testing
