// Every kernel variant family compiles with NVRTC for each architecture we support - no GPU
// needed, so CI runs it. About a minute an architecture on 2 cores: labelled `slow`, left out of
// the sanitizer run (scripts/test.sh), whose other CUDA JIT tests exercise the same code of ours.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "kernels/cuda/kernel_library.h"

namespace jitllm::testing {
namespace {

class CudaJitArchitectures : public ::testing::TestWithParam<int> {};

TEST_P(CudaJitArchitectures, EveryKernelVariantCompilesToACubin) {
  const int arch = GetParam();
  const auto specs = cuda::representativeModules();
  const auto start = std::chrono::steady_clock::now();
  // NVRTC programs are independent: compile on every core.
  std::vector<std::string> failures(specs.size());
  std::vector<cuda::CompiledModule> modules(specs.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); w++) {
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
        try {
          modules[i] = cuda::compileModule(specs[i], arch);
        } catch (const Error& e) {
          failures[i] = e.what();
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  for (size_t i = 0; i < specs.size(); i++) {
    SCOPED_TRACE(specs[i].key());
    ASSERT_TRUE(failures[i].empty()) << failures[i];
    EXPECT_TRUE(modules[i].cubin);
    // An ELF file: the driver loads it as it is.
    ASSERT_GE(modules[i].image.size(), 1000u);
    EXPECT_EQ(0, std::memcmp(modules[i].image.data(),
                             "\x7f"
                             "ELF",
                             4));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("sm_%d: %zu kernel variants in %.1f s\n", arch, specs.size(), s);
}

// One architecture per code path of the kernels (they branch at __CUDA_ARCH__ 800 and 900): sm_75
// below both, sm_86 between, sm_90 above. sm_89 compiled the same sources as sm_86 and cost CI two
// minutes.
INSTANTIATE_TEST_SUITE_P(Architectures, CudaJitArchitectures, ::testing::Values(75, 86, 90),
                         [](const auto& info) { return "sm_" + std::to_string(info.param); });

}  // namespace
}  // namespace jitllm::testing
