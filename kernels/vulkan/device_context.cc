#include "kernels/vulkan/device_context.h"

#include <vector>

namespace jitllm::vulkan {

void createLogicalDevice(DeviceContext& ctx, bool integerDotProduct) {
  const PhysicalDeviceDescription& phys = *ctx.physical;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = phys.computeQueueFamily;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  // Integer dot products (matmul_int.comp) where the device has them; spelt out otherwise.
  VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
  dot.shaderIntegerDotProduct = VK_TRUE;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.bufferDeviceAddress = VK_TRUE;
  f12.timelineSemaphore = VK_TRUE;
  if (integerDotProduct) f12.pNext = &dot;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.pNext = &f12;
  f11.storageBuffer16BitAccess = VK_TRUE;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features.pNext = &f11;
  features.features.shaderInt64 = VK_TRUE;
  features.features.shaderFloat64 = phys.shaderFloat64 ? VK_TRUE : VK_FALSE;
  std::vector<const char*> extensions;
  if (phys.hasMemoryBudget) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  if (integerDotProduct) extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  VkDeviceCreateInfo ci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  ci.pNext = &features;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &qi;
  ci.enabledExtensionCount = uint32_t(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  ctx.check(ctx.instance->fn().vkCreateDevice(phys.handle, &ci, nullptr, &ctx.device), "vkCreateDevice");
  ctx.fn = Loader::loadDevice(ctx.instance->fn(), ctx.device);
  ctx.fn.vkGetDeviceQueue(ctx.device, ctx.queueFamily, 0, &ctx.queue);
}

}  // namespace jitllm::vulkan
