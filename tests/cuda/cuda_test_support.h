// Shared pieces of the CUDA tests: a cuda:0 device (or a visible skip), random inputs, and
// comparisons against the CPU device.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

inline constexpr char kCudaName[] = "CUDA";
using CudaTraits =
    GpuTraits<cuda::CudaDevice, cuda::CudaDeviceOptions, kCudaName, &cuda::CudaDevice::unavailableReason>;
inline std::unique_ptr<cuda::CudaDevice> makeCudaDevice(int index = 0) { return CudaTraits::make(index); }

// Skips the calling test (visibly) when there is no CUDA device.
#define JITLLM_REQUIRE_CUDA() JITLLM_REQUIRE_BACKEND(::jitllm::testing::CudaTraits)

}  // namespace jitllm::testing
