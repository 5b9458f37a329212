// The Vulkan loader, opened at run time, and the function tables jitllm calls through.
//
// jitllm does not link libvulkan: a binary built with the Vulkan backend must still start (and
// run on its CPU) where no loader is installed. Loader opens libvulkan.so.1 (or $JITLLM_VULKAN_LOADER),
// InstanceFunctions and DeviceFunctions are filled from vkGetInstanceProcAddr / vkGetDeviceProcAddr.
// Only the functions listed below exist for jitllm; add one to the list to use it.
//
// Ownership: Loader owns the dlopen handle; the tables are plain pointers valid while the
// loader (and the instance or device they came from) lives.
// Thread-safety: immutable after construction.
#pragma once

#include <vulkan/vulkan.h>

#include <string>

namespace jitllm::vulkan {

#define JITLLM_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)                 \
  X(vkEnumerateInstanceVersion)       \
  X(vkEnumerateInstanceExtensionProperties)

#define JITLLM_VK_INSTANCE_FUNCTIONS(X)       \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define JITLLM_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                  \
  X(vkGetDeviceQueue)                 \
  X(vkCreateBuffer)                   \
  X(vkDestroyBuffer)                  \
  X(vkGetBufferMemoryRequirements)    \
  X(vkAllocateMemory)                 \
  X(vkFreeMemory)                     \
  X(vkBindBufferMemory)               \
  X(vkMapMemory)                      \
  X(vkUnmapMemory)                    \
  X(vkGetBufferDeviceAddress)         \
  X(vkCreateCommandPool)              \
  X(vkDestroyCommandPool)             \
  X(vkAllocateCommandBuffers)         \
  X(vkFreeCommandBuffers)             \
  X(vkResetCommandBuffer)             \
  X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer)               \
  X(vkQueueSubmit)                    \
  X(vkCreateSemaphore)                \
  X(vkDestroySemaphore)               \
  X(vkWaitSemaphores)                 \
  X(vkGetSemaphoreCounterValue)       \
  X(vkCmdPipelineBarrier)             \
  X(vkCmdCopyBuffer)                  \
  X(vkCmdBindPipeline)                \
  X(vkCmdPushConstants)               \
  X(vkCmdDispatch)                    \
  X(vkCreateShaderModule)             \
  X(vkDestroyShaderModule)            \
  X(vkCreatePipelineLayout)           \
  X(vkDestroyPipelineLayout)          \
  X(vkCreateComputePipelines)         \
  X(vkDestroyPipeline)                \
  X(vkCreatePipelineCache)            \
  X(vkDestroyPipelineCache)           \
  X(vkGetPipelineCacheData)           \
  X(vkCreateQueryPool)                \
  X(vkDestroyQueryPool)               \
  X(vkCmdResetQueryPool)              \
  X(vkCmdWriteTimestamp)              \
  X(vkGetQueryPoolResults)            \
  X(vkDeviceWaitIdle)

#define JITLLM_VK_DECLARE(name) PFN_##name name = nullptr;

struct GlobalFunctions {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  JITLLM_VK_GLOBAL_FUNCTIONS(JITLLM_VK_DECLARE)
};
struct InstanceFunctions {
  JITLLM_VK_INSTANCE_FUNCTIONS(JITLLM_VK_DECLARE)
};
struct DeviceFunctions {
  JITLLM_VK_DEVICE_FUNCTIONS(JITLLM_VK_DECLARE)
};

class Loader final {
 public:
  // Throws Error(UNIMPLEMENTED) naming the library when no loader can be opened.
  Loader();
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const GlobalFunctions& global() const { return global_; }
  InstanceFunctions loadInstance(VkInstance instance) const;
  static DeviceFunctions loadDevice(const InstanceFunctions& instance, VkDevice device);

 private:
  void* handle_ = nullptr;
  GlobalFunctions global_;
};

// Throws a jitllm::Error for a failed VkResult: OVERLOADED for out-of-memory results,
// DISCONNECTED for a lost device, FAILED otherwise; the message names what failed and where.
void vkCheck(VkResult result, const char* what, const std::string& where);
const char* vkResultName(VkResult result);

}  // namespace jitllm::vulkan
