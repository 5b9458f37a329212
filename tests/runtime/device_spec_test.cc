// Device specs as users write them (--devices, `devices =`): memory caps with "@SIZE", and sizes
// parsed the same everywhere (device specs, --max-vram, telemetry scripts).
#include <gtest/gtest.h>

#include "base/byte_size.h"
#include "base/error.h"
#include "engine/devices/builtin_backends.h"

namespace jitllm::testing {
namespace {

TEST(ByteSize, SuffixesArePowersOf1024AndAnythingElseIsRefused) {
  EXPECT_EQ(parseByteSize("512"), 512u);
  EXPECT_EQ(parseByteSize("64K"), 64u << 10);
  EXPECT_EQ(parseByteSize("256M"), 256u << 20);
  EXPECT_EQ(parseByteSize("2G"), size_t(2) << 30);
  EXPECT_EQ(parseByteSize("2GiB"), size_t(2) << 30);
  EXPECT_EQ(parseByteSize("64MB"), 64u << 20);
  EXPECT_EQ(parseByteSize("1T"), size_t(1) << 40);
  for (const char* bad : {"", "M", "-1", "1.5G", "2X", "2 G", "99999999999999999999", "20000000000T"}) {
    EXPECT_FALSE(parseByteSize(bad).has_value()) << bad;
  }
}

TEST(DeviceSpec, AnAtSizeCapsWhatADeviceHandsOut) {
  auto devices = runtime::createDevices("cpu:0@64M,cpu:1", {});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]->info().id.str(), "cpu:0");
  EXPECT_EQ(devices[0]->info().memoryBudget, 64u << 20);
  EXPECT_GT(devices[1]->info().memoryBudget, 64u << 20);
  auto fits = devices[0]->allocate(32u << 20);
  try {
    devices[0]->allocate(48u << 20);
    ADD_FAILURE() << "the cap should have refused 48 MiB more";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOverloaded) << e.what();
  }
  for (const char* bad : {"cpu:0@", "cpu:0@0", "cpu:0@lots", "cpu:0@2G,cpu:0@1G"}) {
    EXPECT_THROW(runtime::createDevices(bad, {}), Error) << bad;
  }
}

}  // namespace
}  // namespace jitllm::testing
