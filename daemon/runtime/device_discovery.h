// Which devices are plugged in now: what `devices = auto` owns at start, and what the daemon's
// re-enumeration compares with the devices it has, to find GPUs that arrived or vanished while
// it ran (hot-plug; daemon/server/device_watcher.h says when it looks).
//
// CUDA numbers its devices once per process (cuInit): a GPU plugged in later is not a CUDA device
// until a restart, but it is found through Vulkan when it has a Vulkan driver. Each Vulkan
// enumeration makes a fresh instance, so the loader asks the drivers again. One GPU seen through
// CUDA and Vulkan is one device: Vulkan devices whose UUID a CUDA device has are left out.
//
// Thread-safety: enumerate from any thread; an Enumeration is used by one thread.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/device.h"

namespace jitllm::runtime {

struct FoundDevice {
  Backend backend = Backend::kCpu;
  int index = 0;     // its position among this enumeration's usable devices of its backend
  std::string uuid;  // formatUuid; "" where the backend has none (the CPU)
  std::string name;
  bool software = false;
};

class Enumeration {
 public:
  virtual ~Enumeration() = default;
  // What is there, in preference order.
  virtual const std::vector<FoundDevice>& devices() const = 0;
  // Whether every device of `backend` that is there is in devices(): only then does a device of
  // it that is missing count as gone.
  virtual bool complete(Backend backend) const = 0;
  // Opens a found device under the id "<backend>:<idIndex>". Errors as the backend's create().
  virtual std::unique_ptr<Device> open(const FoundDevice& found, int idIndex) = 0;
};

// The Vulkan devices there are now (complete for Vulkan only); none, and complete for nothing,
// where this build or machine has no Vulkan loader. `why`, when given, says why there are none.
std::unique_ptr<Enumeration> enumerateVulkan(std::string* why = nullptr);

// Every device of the machine (`devices = auto`): cpu:0 (all cores), every CUDA device, and every
// usable Vulkan device not already there through CUDA. A GPU that fails to open is left out, with
// the reason in `skipped` ("cuda:1: ..."), rather than keeping the daemon from starting.
struct AllDevices {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::string> skipped;
};
AllDevices openAllDevices(int cpuThreads);

}  // namespace jitllm::runtime
