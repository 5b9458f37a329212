#include "kernels/vulkan/loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "base/error.h"

namespace jitllm::vulkan {

Loader::Loader() {
  // An explicit loader is the only one tried; else the versioned name, then the dev symlink.
  const char* override = std::getenv("JITLLM_VULKAN_LOADER");
  std::vector<const char*> names = {"libvulkan.so.1", "libvulkan.so"};
  if (override && *override) names = {override};
  std::string errors;
  for (const char* name : names) {
    // RTLD_NODELETE: the loader (and the driver it loads) stays mapped after the last instance is
    // gone. NVIDIA's driver does not survive being unloaded and loaded again in one process: a
    // second vkCreateInstance then fails with VK_ERROR_INCOMPATIBLE_DRIVER (seen on the H200).
    handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle_) break;
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name);
  }
  if (!handle_) {
    JITLLM_FAIL(kUnimplemented, "no Vulkan loader on this machine (", errors,
                "); install libvulkan1, or see docs/vulkan.md for carrying one");
  }
  global_.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle_, "vkGetInstanceProcAddr"));
  if (!global_.vkGetInstanceProcAddr) {
    dlclose(handle_);
    handle_ = nullptr;
    JITLLM_FAIL(kUnimplemented, "the Vulkan loader has no vkGetInstanceProcAddr");
  }
#define JITLLM_VK_LOAD_GLOBAL(name) \
  global_.name = reinterpret_cast<PFN_##name>(global_.vkGetInstanceProcAddr(nullptr, #name));
  JITLLM_VK_GLOBAL_FUNCTIONS(JITLLM_VK_LOAD_GLOBAL)
#undef JITLLM_VK_LOAD_GLOBAL
  if (!global_.vkCreateInstance || !global_.vkEnumerateInstanceVersion) {
    dlclose(handle_);
    handle_ = nullptr;
    JITLLM_FAIL(kUnimplemented, "the Vulkan loader is older than Vulkan 1.1");
  }
}

Loader::~Loader() {
  if (handle_) dlclose(handle_);
}

InstanceFunctions Loader::loadInstance(VkInstance instance) const {
  InstanceFunctions f;
#define JITLLM_VK_LOAD_INSTANCE(name)                                                    \
  f.name = reinterpret_cast<PFN_##name>(global_.vkGetInstanceProcAddr(instance, #name)); \
  if (!f.name) JITLLM_FAIL(kUnimplemented, "the Vulkan loader lacks " #name);
  JITLLM_VK_INSTANCE_FUNCTIONS(JITLLM_VK_LOAD_INSTANCE)
#undef JITLLM_VK_LOAD_INSTANCE
  return f;
}

DeviceFunctions Loader::loadDevice(const InstanceFunctions& instance, VkDevice device) {
  DeviceFunctions f;
#define JITLLM_VK_LOAD_DEVICE(name)                                                   \
  f.name = reinterpret_cast<PFN_##name>(instance.vkGetDeviceProcAddr(device, #name)); \
  if (!f.name) JITLLM_FAIL(kUnimplemented, "the Vulkan driver lacks " #name);
  JITLLM_VK_DEVICE_FUNCTIONS(JITLLM_VK_LOAD_DEVICE)
#undef JITLLM_VK_LOAD_DEVICE
  return f;
}

const char* vkResultName(VkResult result) {
  switch (result) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_EXTERNAL_HANDLE:
      return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
    case VK_ERROR_FRAGMENTATION:
      return "VK_ERROR_FRAGMENTATION";
    case VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS:
      return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
    case VK_PIPELINE_COMPILE_REQUIRED:
      return "VK_PIPELINE_COMPILE_REQUIRED";
    default:
      return "VkResult(other)";
  }
}

void vkCheck(VkResult result, const char* what, const std::string& where) {
  if (result == VK_SUCCESS) return;
  switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS:
    case VK_ERROR_FRAGMENTATION:
      JITLLM_FAIL(kOverloaded, where, ": ", what, " failed: ", vkResultName(result), " (", int(result), ")");
    case VK_ERROR_DEVICE_LOST:
      JITLLM_FAIL(kDisconnected, where, ": ", what, " failed: the device was lost (VK_ERROR_DEVICE_LOST)");
    default:
      JITLLM_FAIL(kFailed, where, ": ", what, " failed: ", vkResultName(result), " (", int(result), ")");
  }
}

}  // namespace jitllm::vulkan
