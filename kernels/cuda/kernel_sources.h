// The CUDA kernel sources (kernels/cuda/kernels/*.cuh), compiled into the binary by
// embed_kernels.cmake.
//
// Thread-safety: immutable.
#pragma once

#include <string_view>

namespace jitllm::cuda {

// The text of kernels/cuda/kernels/<name>; empty for an unknown name.
std::string_view kernelSource(std::string_view name);

}  // namespace jitllm::cuda
