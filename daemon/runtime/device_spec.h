// Creates the devices a command line or config names: "cpu:0", "cpu:0,cpu:1", ...
//
// CPU devices are created on demand (each its own threads and memory budget), so "cpu:0,cpu:1"
// gives two independent CPU devices - how placement across devices is tested on a machine with
// no GPU. "vulkan:N" is the N-th usable Vulkan device, real GPUs before software ones (lavapipe)
// (kernels/vulkan/physical_devices.h); all vulkan:N of one spec share one Vulkan instance. CUDA
// indices come with their backend; naming a backend this build lacks is an Error(UNIMPLEMENTED)
// saying so. "ID@SIZE" caps what the device hands out ("cuda:0@2G", "vulkan:0@256M"): how tests fill
// a device, and how a GPU is shared with other programs.
//
// "auto" is every device of the machine (device_discovery.h).
//
// Thread-safety: pure function; the devices it returns are owned by the caller.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/device.h"

namespace jitllm::runtime {

struct DeviceSpecOptions {
  int cpuThreads = 0;  // per CPU device; 0: all online cores
};

std::vector<std::unique_ptr<Device>> createDevices(const std::string& spec, const DeviceSpecOptions& options);

}  // namespace jitllm::runtime
