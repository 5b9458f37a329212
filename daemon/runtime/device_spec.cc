#include "daemon/runtime/device_spec.h"

#include <charconv>
#include <set>

#include "daemon/runtime/byte_size.h"
#include "daemon/runtime/device_discovery.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/error.h"
#ifdef JITLLM_HAVE_VULKAN
#include "kernels/vulkan/vulkan_device.h"
#endif
#ifdef JITLLM_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace jitllm::runtime {

std::vector<std::unique_ptr<Device>> createDevices(const std::string& spec, const DeviceSpecOptions& options) {
  if (spec == "auto") return openAllDevices(options.cpuThreads).devices;
  std::vector<std::unique_ptr<Device>> devices;
  std::set<std::string> seen;
#ifdef JITLLM_HAVE_VULKAN
  std::shared_ptr<vulkan::VulkanInstance> vulkanInstance;  // one for all vulkan:N of this spec
#endif
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    // "cuda:0@2G": the device may hand out at most that much (tests, and sharing a GPU).
    size_t budget = 0;
    if (const size_t at = item.find('@'); at != std::string::npos) {
      const auto cap = parseByteSize(std::string_view(item).substr(at + 1));
      JITLLM_REQUIRE(cap && *cap > 0, "device '", item, "': after '@' comes a memory cap such as 512M or 2G");
      budget = *cap;
      item.resize(at);
    }
    const size_t colon = item.find(':');
    const std::string backend = item.substr(0, colon);
    int index = 0;
    if (colon != std::string::npos) {
      const char* b = item.data() + colon + 1;
      const char* e = item.data() + item.size();
      auto [p, ec] = std::from_chars(b, e, index);
      JITLLM_REQUIRE(ec == std::errc() && p == e && index >= 0 && index < 1024, "device '", item,
                     "': the index must be a small non-negative number");
    }
    JITLLM_REQUIRE(seen.insert(backend + ":" + std::to_string(index)).second, "device '", item, "' is named twice");
    if (backend == "cpu") {
      cpu::CpuDeviceOptions o;
      o.index = index;
      o.threads = options.cpuThreads;
      o.memoryBudget = budget;
      devices.push_back(std::make_unique<cpu::CpuDevice>(o));
#ifdef JITLLM_HAVE_VULKAN
    } else if (backend == "vulkan") {
      if (!vulkanInstance) vulkanInstance = vulkan::VulkanInstance::create();
      vulkan::VulkanDeviceOptions o;
      o.index = index;
      o.instance = vulkanInstance;
      o.memoryBudget = budget;
      devices.push_back(vulkan::VulkanDevice::create(o));
#endif
#ifdef JITLLM_HAVE_CUDA
    } else if (backend == "cuda") {
      cuda::CudaDeviceOptions o;
      o.index = index;
      o.memoryBudget = budget;
      devices.push_back(cuda::CudaDevice::create(o));
#endif
    } else if (backend == "cuda" || backend == "vulkan") {
      JITLLM_FAIL(kUnimplemented, "device '", item, "': this build has no ", backend, " backend");
    } else {
      JITLLM_FAIL(kFailed, "device '", item, "': unknown backend '", backend, "' (expected cpu, cuda or vulkan)");
    }
  }
  return devices;
}

}  // namespace jitllm::runtime
