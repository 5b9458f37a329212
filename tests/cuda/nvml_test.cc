// NVML telemetry: without the driver it declines with a reason (so jitllmd runs on); with it, the
// GPUs CUDA sees are matched by UUID and read plausible values.
#include <gtest/gtest.h>

#include <cmath>

#include "daemon/scheduler/nvml_telemetry.h"
#include "engine/devices/builtin_backends.h"
#include "tests/cuda/cuda_test_support.h"

namespace jitllm::testing {
namespace {

TEST(NvmlTelemetry, DeclinesWithAReasonWhenItKnowsNoneOfTheDevices) {
  std::string why;
  EXPECT_EQ(scheduler::NvmlTelemetry::open({{"cpu:0", ""}}, &why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST(NvmlTelemetry, ReadsTheGpuCudaSeesMatchedByUuid) {
  JITLLM_REQUIRE_CUDA();
  auto devices = runtime::createDevices("cuda:0", {});
  const std::string uuid = devices[0]->info().uuid;
  ASSERT_EQ(uuid.size(), 36u) << uuid;
  std::string why;
  auto nvml = scheduler::NvmlTelemetry::open({{"cuda:0", uuid}, {"cpu:0", ""}}, &why);
  if (!nvml) GTEST_SKIP() << "a CUDA driver but no NVML: " << why;
  ASSERT_EQ(nvml->matched(), 1u);
  const scheduler::DeviceTelemetry t = nvml->read("cuda:0", 0);
  std::printf("cuda:0 (%s): %.0f C, %.0f W, SM %.0f MHz, utilisation %.0f%%, %zu of %zu MiB used, throttle '%s'\n",
              uuid.c_str(), t.temperatureC, t.powerWatts, t.smClockMhz, t.utilization * 100,
              t.memoryUsed.value_or(0) >> 20, t.memoryTotal.value_or(0) >> 20, t.throttle.c_str());
  EXPECT_GT(t.temperatureC, 5);
  EXPECT_LT(t.temperatureC, 110);
  ASSERT_TRUE(t.memoryTotal.has_value());
  EXPECT_GE(*t.memoryTotal, devices[0]->info().memoryBudget);
  ASSERT_TRUE(t.memoryUsed.has_value());
  EXPECT_GT(*t.memoryUsed, 0u);  // this process's context at least
  EXPECT_TRUE(std::isnan(nvml->read("cpu:0", 0).temperatureC));
  // The same GPU found again later under another id (re-enumeration through Vulkan): looked up by
  // its UUID, it reads the same GPU.
  EXPECT_TRUE(std::isnan(nvml->read("vulkan:7", 0).temperatureC));
  nvml->deviceAdded("vulkan:7", uuid);
  EXPECT_EQ(nvml->matched(), 2u);
  EXPECT_GT(nvml->read("vulkan:7", 0).temperatureC, 5);
  EXPECT_GT(nvml->read("cuda:0", 0).temperatureC, 5) << "the earlier devices still read";
}

}  // namespace
}  // namespace jitllm::testing
