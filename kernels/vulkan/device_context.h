// What every part of one Vulkan device shares: the instance, the physical device's description,
// the logical device, its function table and its compute queue.
//
// Ownership: VulkanDevice owns the VkDevice and destroys it last; the parts (memory pool,
// command stream, pipeline library) borrow the context and are destroyed before it.
// Thread-safety: immutable once made.
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

// Makes ctx's logical device on ctx.physical - one compute queue (ctx.queueFamily) and the
// features every kernel relies on: buffer device addresses, timeline semaphores, 16-bit storage,
// 64-bit integers (and floats where the device has them), VK_EXT_memory_budget where present,
// integer dot products where `integerDotProduct` - and fills its device, function table and queue.
void createLogicalDevice(DeviceContext& ctx, bool integerDotProduct);

}  // namespace jitllm::vulkan
