// Creates the devices a command line or config names: "cpu:0", "cpu:0,cpu:1", ...
//
// CPU devices are created on demand (each its own threads and memory budget), so "cpu:0,cpu:1"
// gives two independent CPU devices - how placement across devices is tested on a machine with
// no GPU. CUDA and Vulkan indices come with their backends; naming one in a build without it is
// an Error(UNIMPLEMENTED) saying so.
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
