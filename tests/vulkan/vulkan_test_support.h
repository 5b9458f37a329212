// Shared pieces of the Vulkan tests: a vulkan:0 device (or a visible skip), random inputs, and
// comparisons against the CPU device.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/error.h"
#include "kernels/vulkan/vulkan_device.h"

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

inline std::unique_ptr<vulkan::VulkanDevice> makeVulkanDevice(int index = 0) {
  vulkan::VulkanDeviceOptions o;
  o.index = index;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  return vulkan::VulkanDevice::create(o);
}

// Skips the calling test (visibly) when there is no Vulkan device.
#define JITLLM_REQUIRE_VULKAN()                                                \
  do {                                                                         \
    const std::string why = ::jitllm::testing::vulkanUnavailableReason();     \
    if (!why.empty()) GTEST_SKIP() << "no Vulkan device: " << why;             \
  } while (0)

inline std::unique_ptr<cpu::CpuDevice> makeCpuDevice(int index = 0) {
  cpu::CpuDeviceOptions o;
  o.index = index;
  o.threads = 2;
  return std::make_unique<cpu::CpuDevice>(o);
}

inline std::vector<float> randomFloats(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng) * scale + offset;
  return v;
}

// A host array copied into a buffer of `device`.
struct Uploaded {
  std::unique_ptr<DeviceBuffer> buffer;
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(buffer->data());
  }
};
template <typename T>
Uploaded upload(Device& device, const std::vector<T>& host) {
  Uploaded u{device.allocate(host.size() * sizeof(T))};
  device.copyFromHost(u.buffer->data(), host.data(), host.size() * sizeof(T));
  return u;
}
template <typename T>
std::vector<T> download(Device& device, const DeviceBuffer& buffer, size_t n) {
  std::vector<T> host(n);
  device.copyToHost(host.data(), const_cast<DeviceBuffer&>(buffer).data(), n * sizeof(T));
  return host;
}

inline double nmse(const std::vector<float>& a, const std::vector<float>& truth) {
  double num = 0, den = 0;
  for (size_t i = 0; i < truth.size(); i++) {
    num += (double(a[i]) - truth[i]) * (double(a[i]) - truth[i]);
    den += double(truth[i]) * truth[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace jitllm::testing
