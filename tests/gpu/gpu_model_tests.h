// The whole-model suites every GPU backend must pass (tests/gpu/model_test.cc). A backend's test
// binary compiles that file, defines testedBackend() and instantiates both suites:
//   INSTANTIATE_TEST_SUITE_P(Vulkan, GpuModels, ::testing::Values(0));
//   INSTANTIATE_TEST_SUITE_P(Vulkan, GpuTinyModels, kGpuTinyMixes);
#pragma once

#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

// The parameter only names the instantiation; the backend comes from testedBackend().
class GpuModels : public ::testing::TestWithParam<int> {};
// Random `tiny` models in one weight mix each.
class GpuTinyModels : public ::testing::TestWithParam<const char*> {};

inline const auto kGpuTinyMixes = ::testing::Values("q8_0", "q4_0", "q4_k_m", "q6_k");

}  // namespace jitllm::testing
