// Every backend this build has, as a registry (the list comes from the build: each backend's
// CMakeLists.txt registers itself with jitllm_backend(); builtin_backends.cc is generated).
//
// Thread-safety: pure functions; what they return belongs to the caller.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "engine/devices/backend_registry.h"

namespace jitllm::runtime {

BackendRegistry builtinBackends();

struct DeviceSpecOptions {
  int cpuThreads = 0;  // per CPU device; 0: one per online core
};

// builtinBackends().open(spec, ...): the devices a command line or config names - "cpu:0",
// "cpu:0,vulkan:0", "cuda:0@2G" (base/device_id.h has the grammar), or "auto".
std::vector<std::unique_ptr<Device>> createDevices(std::string_view spec, const DeviceSpecOptions& options);

}  // namespace jitllm::runtime
