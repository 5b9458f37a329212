#include "kernels/vulkan/vulkan_backend.h"

#include "base/error.h"
#include "kernels/vulkan/physical_devices.h"
#include "kernels/vulkan/vulkan_device.h"

namespace jitllm::vulkan {
namespace {

std::unique_ptr<Device> openVulkan(std::shared_ptr<VulkanInstance> instance, int index, const DeviceOpenOptions& o) {
  VulkanDeviceOptions v;
  v.index = index;
  v.idIndex = o.id.index;
  v.instance = std::move(instance);
  v.memoryBudget = o.memoryCap;
  return VulkanDevice::create(v);
}

class VulkanBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }
  std::unique_ptr<Device> open(const DeviceOpenOptions& options) override {
    if (!instance_) instance_ = VulkanInstance::create();
    return openVulkan(instance_, options.id.index, options);
  }
  Enumeration enumerate(std::string* why) override {
    Enumeration e;
    std::shared_ptr<VulkanInstance> instance;
    try {
      instance = VulkanInstance::create();
    } catch (const Error& error) {
      if (why) *why = error.what();
      return e;
    }
    const auto usable = instance->usableDevices();
    for (size_t i = 0; i < usable.size(); i++) {
      e.devices.push_back({name_, int(i), usable[i]->uuidString(), usable[i]->name, usable[i]->software});
    }
    if (e.devices.empty() && why) *why = "the Vulkan loader reports no usable device";
    e.complete.push_back(name_);
    e.open = [instance](const FoundDevice& f, const DeviceOpenOptions& o) { return openVulkan(instance, f.index, o); };
    return e;
  }
  bool findsArrivals() const override { return true; }

 private:
  std::string name_ = "vulkan";
  std::shared_ptr<VulkanInstance> instance_;  // for devices opened by name
};

}  // namespace

std::unique_ptr<Backend> makeBackend() { return std::make_unique<VulkanBackend>(); }

}  // namespace jitllm::vulkan
