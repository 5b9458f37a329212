#include "kernels/vulkan/physical_devices.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "kernels/device.h"

namespace jitllm::vulkan {
namespace {

// Placement preference of a device type: lower is preferred.
int typeRank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_OTHER:
      return 3;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 4;
    default:
      return 3;
  }
}

bool hasExtension(const std::vector<VkExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

}  // namespace

std::string PhysicalDeviceDescription::uuidString() const { return formatUuid(uuid.data()); }

const char* PhysicalDeviceDescription::typeName() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "software (CPU)";
    default:
      return "other";
  }
}

uint64_t PhysicalDeviceDescription::deviceLocalBytes() const {
  uint64_t best = 0;
  for (const auto& h : heaps) {
    if (h.deviceLocal) best = std::max(best, h.budget ? h.budget : h.size);
  }
  return best;
}

std::shared_ptr<VulkanInstance> VulkanInstance::create() {
  std::shared_ptr<VulkanInstance> self(new VulkanInstance());
  self->loader_ = std::make_unique<Loader>();
  const GlobalFunctions& g = self->loader_->global();
  uint32_t version = 0;
  g.vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_2) {
    JITLLM_FAIL(kUnimplemented, "the Vulkan loader supports Vulkan ", VK_API_VERSION_MAJOR(version), ".",
                VK_API_VERSION_MINOR(version), "; jitllm needs 1.2");
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "jitllm";
  app.pEngineName = "jitllm";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  const VkResult created = g.vkCreateInstance(&ci, nullptr, &self->instance_);
  if (created == VK_ERROR_INCOMPATIBLE_DRIVER) {
    JITLLM_FAIL(kUnimplemented,
                "the Vulkan loader found no driver (ICD) for Vulkan 1.2; install one (lavapipe: "
                "mesa-vulkan-drivers) or point VK_DRIVER_FILES at its JSON");
  }
  vkCheck(created, "vkCreateInstance", "vulkan");
  self->fn_ = self->loader_->loadInstance(self->instance_);

  uint32_t count = 0;
  vkCheck(self->fn_.vkEnumeratePhysicalDevices(self->instance_, &count, nullptr), "vkEnumeratePhysicalDevices",
          "vulkan");
  std::vector<VkPhysicalDevice> handles(count);
  vkCheck(self->fn_.vkEnumeratePhysicalDevices(self->instance_, &count, handles.data()), "vkEnumeratePhysicalDevices",
          "vulkan");
  for (uint32_t i = 0; i < count; i++) self->devices_.push_back(self->describe(handles[i], i));
  std::stable_sort(self->devices_.begin(), self->devices_.end(), [](const auto& a, const auto& b) {
    if (a.usable() != b.usable()) return a.usable();
    return typeRank(a.type) < typeRank(b.type);
  });
  // The first instance stays for the life of the process, so the loader keeps the drivers'
  // libraries loaded: the daemon makes a fresh instance at every re-enumeration, and unloading and
  // reloading NVIDIA's driver library each time made vkCreateInstance fail after a few rounds
  // (VK_ERROR_INCOMPATIBLE_DRIVER). Deliberately never destroyed (no teardown-order hazards with
  // the driver's own exit handlers); it stays reachable, so leak checkers do not count it.
  static const auto* anchor = new std::shared_ptr<VulkanInstance>(self);
  (void)anchor;
  return self;
}

VulkanInstance::~VulkanInstance() {
  if (instance_) fn_.vkDestroyInstance(instance_, nullptr);
}

std::vector<const PhysicalDeviceDescription*> VulkanInstance::usableDevices() const {
  std::vector<const PhysicalDeviceDescription*> out;
  for (const auto& d : devices_) {
    if (d.usable()) out.push_back(&d);
  }
  return out;
}

namespace {

// The properties of a 1.2 device jitllm plans with: UUID, driver, subgroups and compute limits.
void readProperties(const InstanceFunctions& fn, VkPhysicalDevice device, PhysicalDeviceDescription& d) {
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  driver.pNext = &subgroup;
  VkPhysicalDeviceIDProperties ids{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  ids.pNext = &driver;
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &ids;
  fn.vkGetPhysicalDeviceProperties2(device, &props);
  std::memcpy(d.uuid.data(), ids.deviceUUID, 16);
  d.driverName = driver.driverName;
  d.driverInfo = driver.driverInfo;
  d.subgroupSize = subgroup.subgroupSize;
  d.subgroupShuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                      (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  const VkPhysicalDeviceLimits& limits = props.properties.limits;
  d.maxSharedMemoryBytes = limits.maxComputeSharedMemorySize;
  d.maxWorkgroupInvocations = limits.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; i++) d.maxWorkgroupCount[size_t(i)] = limits.maxComputeWorkGroupCount[i];
  d.maxPushConstantBytes = limits.maxPushConstantsSize;
  d.timestampPeriodNs = limits.timestampPeriod;  // kept only if the compute queue has timestamps
}

void readFeatures(const InstanceFunctions& fn, VkPhysicalDevice device, bool hasIntegerDot,
                  PhysicalDeviceDescription& d) {
  VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  if (hasIntegerDot) f12.pNext = &dot;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features.pNext = &f11;
  fn.vkGetPhysicalDeviceFeatures2(device, &features);
  d.integerDotProduct = hasIntegerDot && dot.shaderIntegerDotProduct;
  d.shaderFloat64 = features.features.shaderFloat64;
  d.shaderInt64 = features.features.shaderInt64;
  d.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
  d.bufferDeviceAddress = f12.bufferDeviceAddress;
  d.timelineSemaphore = f12.timelineSemaphore;
}

void readHeaps(const InstanceFunctions& fn, VkPhysicalDevice device, PhysicalDeviceDescription& d) {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 memory{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  if (d.hasMemoryBudget) memory.pNext = &budget;
  fn.vkGetPhysicalDeviceMemoryProperties2(device, &memory);
  for (uint32_t h = 0; h < memory.memoryProperties.memoryHeapCount; h++) {
    MemoryHeapInfo heap;
    heap.size = memory.memoryProperties.memoryHeaps[h].size;
    heap.deviceLocal = memory.memoryProperties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
    if (d.hasMemoryBudget) {
      heap.budget = budget.heapBudget[h];
      heap.usage = budget.heapUsage[h];
    }
    d.heaps.push_back(heap);
  }
}

void chooseComputeQueue(const InstanceFunctions& fn, VkPhysicalDevice device, PhysicalDeviceDescription& d) {
  uint32_t familyCount = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(device, &familyCount, nullptr);
  std::vector<VkQueueFamilyProperties> families(familyCount);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(device, &familyCount, families.data());
  // Prefer a compute queue without graphics (an async-compute family), else any with compute.
  for (int pass = 0; pass < 2 && d.computeQueueFamily == UINT32_MAX; pass++) {
    for (uint32_t i = 0; i < familyCount; i++) {
      const VkQueueFlags flags = families[i].queueFlags;
      if (!(flags & VK_QUEUE_COMPUTE_BIT)) continue;
      if (pass == 0 && (flags & VK_QUEUE_GRAPHICS_BIT)) continue;
      d.computeQueueFamily = i;
      break;
    }
  }
  if (d.computeQueueFamily == UINT32_MAX || families[d.computeQueueFamily].timestampValidBits == 0) {
    d.timestampPeriodNs = 0;
  }
}

// What the device lacks of what jitllm needs; empty when it is usable.
std::string unusableReason(const PhysicalDeviceDescription& d) {
  std::string missing;
  auto need = [&](bool ok, const char* what) {
    if (!ok) missing += std::string(missing.empty() ? "" : ", ") + what;
  };
  need(d.computeQueueFamily != UINT32_MAX, "a compute queue");
  need(d.bufferDeviceAddress, "bufferDeviceAddress");
  need(d.shaderInt64, "shaderInt64");
  need(d.storageBuffer16BitAccess, "storageBuffer16BitAccess");
  need(d.timelineSemaphore, "timelineSemaphore");
  need(d.maxPushConstantBytes >= 128, "128 bytes of push constants");
  need(d.maxSharedMemoryBytes >= 16384, "16 KiB of workgroup memory");
  need(d.maxWorkgroupInvocations >= 256, "256-invocation workgroups");
  return missing.empty() ? std::string() : "lacks " + missing;
}

}  // namespace

PhysicalDeviceDescription VulkanInstance::describe(VkPhysicalDevice device, uint32_t loaderIndex) const {
  PhysicalDeviceDescription d;
  d.handle = device;
  d.loaderIndex = loaderIndex;

  uint32_t extCount = 0;
  fn_.vkEnumerateDeviceExtensionProperties(device, nullptr, &extCount, nullptr);
  std::vector<VkExtensionProperties> extensions(extCount);
  fn_.vkEnumerateDeviceExtensionProperties(device, nullptr, &extCount, extensions.data());
  d.hasMemoryBudget = hasExtension(extensions, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  const bool hasIntegerDot = hasExtension(extensions, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);

  VkPhysicalDeviceProperties base{};
  fn_.vkGetPhysicalDeviceProperties(device, &base);
  d.name = base.deviceName;
  d.type = base.deviceType;
  d.software = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  d.vendorId = base.vendorID;
  d.deviceId = base.deviceID;
  d.apiVersion = base.apiVersion;
  d.driverVersion = base.driverVersion;
  if (base.apiVersion < VK_API_VERSION_1_2) {
    d.unusableReason = "Vulkan " + std::to_string(VK_API_VERSION_MAJOR(base.apiVersion)) + "." +
                       std::to_string(VK_API_VERSION_MINOR(base.apiVersion)) + " device; jitllm needs 1.2";
    return d;
  }
  readProperties(fn_, device, d);
  readFeatures(fn_, device, hasIntegerDot, d);
  readHeaps(fn_, device, d);
  chooseComputeQueue(fn_, device, d);
  d.unusableReason = unusableReason(d);
  return d;
}

}  // namespace jitllm::vulkan
