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

inline std::unique_ptr<cuda::CudaDevice> makeCudaDevice(int index = 0) {
  cuda::CudaDeviceOptions o;
  o.index = index;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  return cuda::CudaDevice::create(o);
}

// Skips the calling test (visibly) when there is no CUDA device.
#define JITLLM_REQUIRE_CUDA()                                                \
  do {                                                                       \
    const std::string why = ::jitllm::cuda::CudaDevice::unavailableReason(); \
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;             \
  } while (0)

}  // namespace jitllm::testing
