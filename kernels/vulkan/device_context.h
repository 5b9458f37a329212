// What every part of one Vulkan device shares: the instance, the physical device's description,
// the logical device, its function table and its compute queue.
//
// Ownership: VulkanDevice owns the VkDevice and destroys it last; the parts (memory pool,
// command stream, pipeline library) borrow the context and are destroyed before it.
// Thread-safety: immutable after construction.
#pragma once

#include <memory>
#include <string>

#include "kernels/vulkan/loader.h"
#include "kernels/vulkan/physical_devices.h"

namespace jitllm::vulkan {

struct DeviceContext {
  std::shared_ptr<VulkanInstance> instance;
  const PhysicalDeviceDescription* physical = nullptr;  // owned by instance
  VkDevice device = VK_NULL_HANDLE;
  DeviceFunctions fn;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queueFamily = 0;
  std::string id;  // "vulkan:0", for messages

  void check(VkResult result, const char* what) const { vkCheck(result, what, id); }
};

}  // namespace jitllm::vulkan
