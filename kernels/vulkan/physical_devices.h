// The Vulkan instance and what it finds: every physical device with its properties, memory heaps
// (with VK_EXT_memory_budget's live budget where the driver has it) and the features the JIT's
// kernels need.
//
// Order is placement preference: discrete GPUs, integrated, virtual, other, and software
// rasterizers (lavapipe, SwiftShader: VK_PHYSICAL_DEVICE_TYPE_CPU) last; within a kind, the
// loader's order. "vulkan:N" names the N-th *usable* device of this order, so the default
// device on a machine with a GPU is the GPU, and lavapipe is vulkan:0 only where it is alone.
// The UUID (VkPhysicalDeviceIDProperties::deviceUUID) is what matches one GPU seen through CUDA
// and Vulkan (CUDA's cudaDeviceProp::uuid is the same 16 bytes on NVIDIA).
//
// Ownership: a VulkanInstance owns the loader and the VkInstance; devices created from it hold a
// shared_ptr to it, so it lives as long as the last of them.
// Thread-safety: immutable after create(); any thread may read.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/vulkan/loader.h"

namespace jitllm::vulkan {

struct MemoryHeapInfo {
  uint64_t size = 0;
  uint64_t budget = 0;  // VK_EXT_memory_budget: what this process may use now; 0 when unknown
  uint64_t usage = 0;   // VK_EXT_memory_budget: what this process uses now
  bool deviceLocal = false;
};

struct PhysicalDeviceDescription {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  uint32_t loaderIndex = 0;  // position in vkEnumeratePhysicalDevices
  std::string name;          // "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string driverName;    // VkPhysicalDeviceDriverProperties
  std::string driverInfo;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  bool software = false;  // a CPU implementation: usable, placed last
  uint32_t vendorId = 0, deviceId = 0, apiVersion = 0, driverVersion = 0;
  std::array<uint8_t, 16> uuid{};
  std::vector<MemoryHeapInfo> heaps;
  bool hasMemoryBudget = false;  // VK_EXT_memory_budget present

  // What the kernels are specialised for.
  uint32_t subgroupSize = 0;
  bool subgroupShuffle = false;  // subgroupShuffleXor in compute shaders
  uint32_t maxSharedMemoryBytes = 0;
  uint32_t maxWorkgroupInvocations = 0;
  std::array<uint32_t, 3> maxWorkgroupCount{};
  uint32_t maxPushConstantBytes = 0;
  float timestampPeriodNs = 0;  // 0: compute queues cannot write timestamps
  bool shaderFloat64 = false;
  bool integerDotProduct = false;  // VK_KHR_shader_integer_dot_product with shaderIntegerDotProduct

  // Requirements (see unusableReason).
  uint32_t computeQueueFamily = UINT32_MAX;
  bool bufferDeviceAddress = false, shaderInt64 = false, storageBuffer16BitAccess = false, timelineSemaphore = false;
  std::string unusableReason;  // empty when jitllm can run on it

  bool usable() const { return unusableReason.empty(); }
  std::string uuidString() const;  // 8-4-4-4-12 hex, as nvidia-smi and vulkaninfo print it
  const char* typeName() const;
  // The largest device-local heap: its budget where known, else its size.
  uint64_t deviceLocalBytes() const;
};

class VulkanInstance final {
 public:
  // Throws Error(UNIMPLEMENTED) when there is no loader or it cannot make a Vulkan 1.2 instance.
  static std::shared_ptr<VulkanInstance> create();
  ~VulkanInstance();
  VulkanInstance(const VulkanInstance&) = delete;
  VulkanInstance& operator=(const VulkanInstance&) = delete;

  VkInstance handle() const { return instance_; }
  const Loader& loader() const { return *loader_; }
  const InstanceFunctions& fn() const { return fn_; }

  // Every physical device, in preference order, usable ones first.
  const std::vector<PhysicalDeviceDescription>& devices() const { return devices_; }
  // The usable ones only: index N is "vulkan:N".
  std::vector<const PhysicalDeviceDescription*> usableDevices() const;

 private:
  VulkanInstance() = default;
  PhysicalDeviceDescription describe(VkPhysicalDevice device, uint32_t loaderIndex) const;

  std::unique_ptr<Loader> loader_;
  VkInstance instance_ = VK_NULL_HANDLE;
  InstanceFunctions fn_;
  std::vector<PhysicalDeviceDescription> devices_;
};

}  // namespace jitllm::vulkan
