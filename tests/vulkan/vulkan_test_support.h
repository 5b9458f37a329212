// Shared pieces of the Vulkan tests: a vulkan:0 device (or a visible skip), random inputs, and
// comparisons against the CPU device.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/vulkan/vulkan_device.h"
#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

// Why vulkan:0 cannot be made here, or empty when it can.
inline std::string vulkanUnavailableReason() {
  try {
    auto instance = vulkan::VulkanInstance::create();
    if (instance->usableDevices().empty()) {
      std::string why = "no usable Vulkan device";
      for (const auto& d : instance->devices()) why += "; " + d.name + ": " + d.unusableReason;
      return why + " (install mesa-vulkan-drivers for lavapipe)";
    }
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

inline constexpr char kVulkanName[] = "Vulkan";
using VulkanTraits =
    GpuTraits<vulkan::VulkanDevice, vulkan::VulkanDeviceOptions, kVulkanName, &vulkanUnavailableReason>;
inline std::unique_ptr<vulkan::VulkanDevice> makeVulkanDevice(int index = 0) { return VulkanTraits::make(index); }

// Skips the calling test (visibly) when there is no Vulkan device.
#define JITLLM_REQUIRE_VULKAN() JITLLM_REQUIRE_BACKEND(::jitllm::testing::VulkanTraits)

}  // namespace jitllm::testing
