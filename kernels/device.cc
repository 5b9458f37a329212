#include "kernels/device.h"

namespace jitllm {

const char* backendName(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
    case Backend::kVulkan: return "vulkan";
  }
  return "unknown";
}

}  // namespace jitllm
