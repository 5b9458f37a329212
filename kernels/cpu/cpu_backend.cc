#include "kernels/cpu/cpu_backend.h"

#include "kernels/cpu/cpu_device.h"

namespace jitllm::cpu {
namespace {

std::unique_ptr<Device> openCpu(const DeviceOpenOptions& o) {
  CpuDeviceOptions cpu;
  cpu.index = o.id.index;
  cpu.threads = o.hostThreads;
  cpu.memoryBudget = o.memoryCap;
  return std::make_unique<CpuDevice>(cpu);
}

class CpuBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }
  std::unique_ptr<Device> open(const DeviceOpenOptions& options) override { return openCpu(options); }
  // The machine's cores as one device, cpu:0.
  Enumeration enumerate(std::string*) override {
    Enumeration e;
    e.devices.push_back({name_, 0, "", "CPU", false});
    e.open = [](const FoundDevice&, const DeviceOpenOptions& o) { return openCpu(o); };
    return e;
  }

 private:
  std::string name_ = "cpu";
};

}  // namespace

std::unique_ptr<Backend> makeBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace jitllm::cpu
