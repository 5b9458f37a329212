// The Vulkan test binary's backend, for the shared GPU suites (tests/gpu).
#include "tests/gpu/gpu_model_tests.h"
#include "tests/vulkan/vulkan_test_support.h"

namespace jitllm::testing {

const GpuBackend& testedBackend() {
  static const GpuBackend backend{
      "vulkan", &vulkanUnavailableReason,
      [](int index) -> std::unique_ptr<Device> { return makeVulkanDevice(index); },
      []() -> int {
        try {
          return int(vulkan::VulkanInstance::create()->usableDevices().size());
        } catch (const Error&) {
          return 0;
        }
      }};
  return backend;
}

INSTANTIATE_TEST_SUITE_P(Vulkan, GpuModels, ::testing::Values(0));
INSTANTIATE_TEST_SUITE_P(Vulkan, GpuTinyModels, kGpuTinyMixes);

}  // namespace jitllm::testing
