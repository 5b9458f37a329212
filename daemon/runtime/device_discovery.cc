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
namespace {

class NoEnumeration final : public Enumeration {
 public:
  const std::vector<FoundDevice>& devices() const override { return none_; }
  bool complete(Backend) const override { return false; }
  std::unique_ptr<Device> open(const FoundDevice&, int) override {
    JITLLM_FAIL(kUnimplemented, "nothing was enumerated");
  }

 private:
  std::vector<FoundDevice> none_;
};

#ifdef JITLLM_HAVE_VULKAN
class VulkanEnumeration final : public Enumeration {
 public:
  explicit VulkanEnumeration(std::shared_ptr<vulkan::VulkanInstance> instance) : instance_(std::move(instance)) {
    const auto usable = instance_->usableDevices();
    for (size_t i = 0; i < usable.size(); i++) {
      found_.push_back({Backend::kVulkan, int(i), usable[i]->uuidString(), usable[i]->name, usable[i]->software});
    }
  }
  const std::vector<FoundDevice>& devices() const override { return found_; }
  bool complete(Backend backend) const override { return backend == Backend::kVulkan; }
  std::unique_ptr<Device> open(const FoundDevice& found, int idIndex) override {
    JITLLM_REQUIRE(found.backend == Backend::kVulkan, "not a Vulkan device");
    vulkan::VulkanDeviceOptions o;
    o.index = found.index;
    o.idIndex = idIndex;
    o.instance = instance_;
    return vulkan::VulkanDevice::create(o);
  }

 private:
  std::shared_ptr<vulkan::VulkanInstance> instance_;
  std::vector<FoundDevice> found_;
};
#endif

}  // namespace

std::unique_ptr<Enumeration> enumerateVulkan(std::string* why) {
#ifdef JITLLM_HAVE_VULKAN
  try {
    return std::make_unique<VulkanEnumeration>(vulkan::VulkanInstance::create());
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::make_unique<NoEnumeration>();
  }
#else
  if (why) *why = "this build has no Vulkan backend";
  return std::make_unique<NoEnumeration>();
#endif
}

AllDevices openAllDevices(int cpuThreads) {
  AllDevices all;
  cpu::CpuDeviceOptions cpu;
  cpu.threads = cpuThreads;
  all.devices.push_back(std::make_unique<cpu::CpuDevice>(cpu));
  std::set<std::string> uuids;
#ifdef JITLLM_HAVE_CUDA
  for (int i = 0; i < cuda::CudaDevice::count(); i++) {
    try {
      cuda::CudaDeviceOptions o;
      o.index = i;
      all.devices.push_back(cuda::CudaDevice::create(o));
      uuids.insert(all.devices.back()->info().uuid);
    } catch (const Error& e) {
      all.skipped.push_back("cuda:" + std::to_string(i) + ": " + e.what());
    }
  }
#endif
  const auto vulkan = enumerateVulkan();
  for (const FoundDevice& f : vulkan->devices()) {
    if (uuids.count(f.uuid)) continue;  // the same GPU, already there through CUDA
    try {
      all.devices.push_back(vulkan->open(f, f.index));
    } catch (const Error& e) {
      all.skipped.push_back("vulkan:" + std::to_string(f.index) + ": " + e.what());
    }
  }
  return all;
}

}  // namespace jitllm::runtime
