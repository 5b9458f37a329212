// Discovery of Vulkan devices and the JIT's on-disk kernel cache.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/devices/builtin_backends.h"
#include "engine/runtime/model.h"
#include "tests/gpu/serving_shapes.h"
#include "tests/vulkan/vulkan_test_support.h"

namespace jitllm::testing {
namespace {

TEST(VulkanDevices, DiscoveryListsUsableDevicesFirstAndSoftwareOnesAfterRealGpus) {
  JITLLM_REQUIRE_VULKAN();
  const auto devices = vulkan::listVulkanDevices();
  ASSERT_FALSE(devices.empty());
  bool seenSoftware = false, seenUnusable = false;
  for (const auto& d : devices) {
    std::printf("vulkan device: %s [%s] %s, driver %s %s, uuid %s, subgroup %u, shared %u B, heap %.2f GiB%s%s\n",
                d.name.c_str(), d.typeName(), d.usable() ? "usable" : d.unusableReason.c_str(), d.driverName.c_str(),
                d.driverInfo.c_str(), d.uuidString().c_str(), d.subgroupSize, d.maxSharedMemoryBytes,
                double(d.deviceLocalBytes()) / double(1ull << 30), d.hasMemoryBudget ? ", memory budget" : "",
                d.software ? ", software" : "");
    if (!d.usable()) {
      seenUnusable = true;
      continue;
    }
    EXPECT_FALSE(seenUnusable) << "a usable device after an unusable one";
    if (d.software) seenSoftware = true;
    EXPECT_FALSE(seenSoftware && !d.software) << d.name << ": a real GPU placed after a software device";
    EXPECT_GT(d.deviceLocalBytes(), 0u);
    EXPECT_GT(d.subgroupSize, 0u);
  }
  auto gpu = makeVulkanDevice();
  EXPECT_EQ(gpu->info().id.str(), "vulkan:0");
  EXPECT_FALSE(gpu->info().caps.hostMemory);
  EXPECT_EQ(gpu->info().software, gpu->physical().software);
  EXPECT_GT(gpu->info().memoryBudget, 0u);
}

TEST(VulkanDevices, DeviceSpecCreatesVulkanDevicesAndRejectsMissingOnes) {
  JITLLM_REQUIRE_VULKAN();
  auto devices = runtime::createDevices("cpu:0,vulkan:0", {});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1]->info().id.str(), "vulkan:0");
  try {
    runtime::createDevices("vulkan:99", {});
    FAIL() << "vulkan:99 should not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_NE(std::string(e.what()).find("usable Vulkan device"), std::string::npos) << e.what();
  }
}

// The daemon makes a fresh instance at every re-enumeration (every 30 s, and on udev's news), and
// devices come and go with hot-plug: making and dropping instances and devices over and over must
// keep working. (On NVIDIA's driver vkCreateInstance failed after a few rounds until the first
// instance was kept for the process.)
TEST(VulkanDevices, InstancesAndDevicesComeAndGoAsOftenAsReEnumerationMakesThem) {
  JITLLM_REQUIRE_VULKAN();
  for (int round = 0; round < 40; round++) {
    try {
      auto instance = vulkan::VulkanInstance::create();
      ASSERT_FALSE(instance->usableDevices().empty()) << "round " << round;
      if (round % 10 == 0) {
        vulkan::VulkanDeviceOptions o;
        o.instance = instance;
        o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
        auto device = vulkan::VulkanDevice::create(o);
        auto buffer = device->allocate(size_t(1) << 20);
        EXPECT_TRUE(device->responsive());
      }
    } catch (const Error& e) {
      FAIL() << "round " << round << ": " << e.what();
    }
  }
}

// The driver's live figures (VK_EXT_memory_budget) are what the scheduler's pressure policy reads
// for a Vulkan GPU without NVML: our allocations show in them, and the budget is real.
TEST(VulkanDevices, TheDriversLiveMemoryBudgetCountsOurAllocations) {
  JITLLM_REQUIRE_VULKAN();
  auto gpu = makeVulkanDevice();
  if (!gpu->physical().hasMemoryBudget) {
    EXPECT_FALSE(gpu->driverMemory().has_value());
    GTEST_SKIP() << gpu->info().name << " has no VK_EXT_memory_budget (lavapipe does not): our own accounting only";
  }
  const auto before = gpu->driverMemory();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(before->available, 0u);
  auto buffer = gpu->allocate(size_t(256) << 20);
  const auto after = gpu->driverMemory();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->used, before->used + (size_t(200) << 20)) << "256 MiB allocated";
  std::printf("%s: %zu MiB used by us, %zu MiB available to us\n", gpu->info().name.c_str(), after->used >> 20,
              after->available >> 20);
}

TEST(VulkanDevices, KernelsCompiledOnceAreLoadedFromTheDiskCacheByTheNextDevice) {
  JITLLM_REQUIRE_VULKAN();
  const auto root = std::filesystem::temp_directory_path() / ("jitllm-vk-cache-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  auto run = [&] {
    vulkan::VulkanDeviceOptions o;
    o.cacheRoot = root.string();
    auto d = vulkan::VulkanDevice::create(o);
    std::vector<float> host(1000, 1.5f);
    auto a = upload(*d, host);
    auto b = upload(*d, host);
    d->add(a.as<float>(), b.as<float>(), 1000);
    d->swiglu(a.as<float>(), b.as<float>(), a.as<float>(), 1000);
    auto back = download<float>(*d, *a.buffer, 1000);
    EXPECT_FLOAT_EQ(back[999], 3.0f / (1.0f + std::exp(-3.0f)) * 1.5f);
    return std::make_pair(d->kernelStats(), d->cacheDirectory());
  };
  const auto [first, dir] = run();
  EXPECT_EQ(first.pipelines, 2);
  EXPECT_EQ(first.compiled, 2);
  EXPECT_EQ(first.loadedFromDisk, 0);
  // The directory names the device by UUID and driver version.
  EXPECT_NE(dir.find(vulkan::listVulkanDevices().front().uuidString()), std::string::npos) << dir;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/spirv")) files += e.path().extension() == ".spv";
  EXPECT_EQ(files, 2u);
  const auto [second, dir2] = run();
  EXPECT_EQ(second.compiled, 0);
  EXPECT_EQ(second.loadedFromDisk, 2);
  // A corrupted entry is recompiled, not used.
  for (const auto& e : std::filesystem::directory_iterator(dir + "/spirv")) {
    std::filesystem::resize_file(e.path(), 40);
  }
  const auto [third, dir3] = run();
  EXPECT_EQ(third.compiled, 2);
  std::filesystem::remove_all(root);
}

// After Model::prepareKernels, serving makes no pipeline: decode batches of 1 to 9 sessions,
// prefills of one session and of several beside decodes, contexts past one attention chunk (the
// split kernels) - all on pipelines made ahead, on a cold cache, their SPIR-V compiled in
// parallel (the tiny Q4_K_M shape: integer products at every tokens-per-workgroup width). A
// second device on the warm disk cache compiles nothing.
TEST(VulkanDevices, AfterPrepareKernelsNoStepShapeMakesAPipeline) {
  JITLLM_REQUIRE_VULKAN();
  const std::string path = writeTinyQ4KM("vk-prepare");
  if (path.empty()) GTEST_SKIP() << "no vocab file for the tiny shape in " << JITLLM_SHARED_DIR;
  const auto root = std::filesystem::temp_directory_path() / ("jitllm-vk-prep-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  vulkan::VulkanDeviceOptions o;
  o.cacheRoot = root.string();  // cold: every pipeline is compiled here
  auto gpu = vulkan::VulkanDevice::create(o);
  runtime::ModelLoadOptions lo;
  lo.devices = {gpu.get()};
  auto model = runtime::Model::load(path, lo);
  const size_t made = model->prepareKernels();
  const vulkan::KernelStats prepared = gpu->kernelStats();
  std::printf("prepareKernels: %zu pipelines (%d compiled, %.2f s shaderc, %.2f s driver) in %.2f s\n", made,
              prepared.compiled, prepared.compileSeconds, prepared.pipelineSeconds, gpu->stats().prepareSeconds);
  EXPECT_GT(made, 8u);
  runServingShapes(*model, {1, 2, 3, 5, 9}, 100, 2, 256);  // 100 tokens: past one attention chunk
  EXPECT_EQ(gpu->kernelStats().madeOnUse, 0) << "a step shape prepareKernels did not foresee";
  model.reset();
  gpu.reset();
  auto again = vulkan::VulkanDevice::create(o);
  lo.devices = {again.get()};
  model = runtime::Model::load(path, lo);
  model->prepareKernels();
  EXPECT_EQ(again->kernelStats().compiled, 0);
  EXPECT_GT(again->kernelStats().loadedFromDisk, 8);
  std::printf("warm cache: prepareKernels in %.2f s\n", again->stats().prepareSeconds);
  model.reset();
  again.reset();
  std::filesystem::remove(path);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace jitllm::testing
