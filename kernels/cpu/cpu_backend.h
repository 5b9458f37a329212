// The CPU backend: "cpu:N" devices, each a CpuDevice of its own (threads and a memory budget), so
// "cpu:0,cpu:1" makes two - how placement across devices is tested on a machine without a GPU.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace jitllm::cpu {

std::unique_ptr<Backend> makeBackend();

}  // namespace jitllm::cpu
