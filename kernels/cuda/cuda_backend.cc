#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_device.h"

namespace jitllm::cuda {
namespace {

std::unique_ptr<Device> openCuda(int index, const DeviceOpenOptions& o) {
  CudaDeviceOptions cuda;
  cuda.index = index;
  cuda.memoryBudget = o.memoryCap;
  return CudaDevice::create(cuda);
}

class CudaBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }
  std::unique_ptr<Device> open(const DeviceOpenOptions& options) override {
    return openCuda(options.id.index, options);
  }
  Enumeration enumerate(std::string* why) override {
    Enumeration e;
    const int n = CudaDevice::count();
    if (n == 0 && why) *why = CudaDevice::unavailableReason();
    // The UUID is known once a device is open; the registry takes it from there.
    for (int i = 0; i < n; i++) e.devices.push_back({name_, i, "", "CUDA device " + std::to_string(i), false});
    e.open = [](const FoundDevice& f, const DeviceOpenOptions& o) { return openCuda(f.index, o); };
    return e;
  }

 private:
  std::string name_ = "cuda";
};

}  // namespace

std::unique_ptr<Backend> makeBackend() { return std::make_unique<CudaBackend>(); }

}  // namespace jitllm::cuda
