// The CUDA backend: "cuda:N" is the N-th GPU the CUDA driver reports. CUDA numbers its GPUs once
// per process (cuInit), so it finds no arrivals; a GPU plugged in later comes through Vulkan.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace jitllm::cuda {

std::unique_ptr<Backend> makeBackend();

}  // namespace jitllm::cuda
