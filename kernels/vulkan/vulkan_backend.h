// The Vulkan backend: "vulkan:N" is the N-th usable Vulkan device, real GPUs before software ones
// (lavapipe) (physical_devices.h). Devices opened by name share one instance; each enumeration
// makes a fresh instance, so the loader asks the drivers again and a GPU plugged in after start
// is found.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace jitllm::vulkan {

std::unique_ptr<Backend> makeBackend();

}  // namespace jitllm::vulkan
