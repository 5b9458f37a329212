// placeUnits and placeStreaming: which device each unit of a model takes, by speed and room.
#include "policies/placement.h"

#include <gtest/gtest.h>

#include "tests/policies/placement_fixtures.h"

namespace jitllm::policies {
namespace {

TEST(Placement, TheFastestDeviceFillsFirstThenTheNextInOneRunEach) {
  // The CPU is listed first but is slower; the software device is last whatever its memory.
  const std::vector<PlacementDevice> devices = {placementDevice("cpu:0", 1, 4096, false),
                                                placementDevice("cuda:0", 10, 1000),
                                                placementDevice("vulkan:0", 50, 100000, true, true)};
  const Placement p = placeUnits(devices, placementRequest(16));
  ASSERT_TRUE(p.ok) << p.why;
  // cuda:0 takes token_embd (100 MB) and 8 blocks (110 MB each): 980 MB of its 1000.
  for (int u = 0; u <= 8; u++) EXPECT_EQ(p.unitDevice[size_t(u)], 1) << u;
  for (int u = 9; u <= 17; u++) EXPECT_EQ(p.unitDevice[size_t(u)], 0) << u;
  EXPECT_EQ(p.bytesUsed[1], 980 * kMB);
  EXPECT_EQ(p.bytesUsed[0], 8 * 10 * kMB);  // the CPU holds only KV: weights stay in the file
  EXPECT_EQ(p.bytesUsed[2], 0u);
}

TEST(Placement, ACapPerDeviceAndSoftwareDevicesLastAndAClearShortfall) {
  PlacementRequest r = placementRequest(4);
  r.maxDeviceBytes = 350 * kMB;  // --max-vram: each GPU takes at most 350 of its 4096 MB
  const Placement capped = placeUnits({placementDevice("cuda:0", 10, 4096), placementDevice("cuda:1", 10, 4096)}, r);
  ASSERT_TRUE(capped.ok) << capped.why;
  EXPECT_EQ(capped.unitDevice, (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(capped.bytesUsed, (std::vector<size_t>{320 * kMB, 320 * kMB}));

  // Only a software device has room: it is used.
  const Placement soft = placeUnits(
      {placementDevice("cuda:0", 10, 50), placementDevice("vulkan:0", 0.1, 4096, true, true)}, placementRequest(4));
  ASSERT_TRUE(soft.ok);
  EXPECT_EQ(soft.unitDevice, std::vector<int>(6, 1));

  const Placement none = placeUnits({placementDevice("cuda:0", 10, 300)}, placementRequest(4));
  EXPECT_FALSE(none.ok);
  EXPECT_EQ(none.why, "units 2-5 need 430 MiB more than the devices have free");
}

TEST(Placement, AModelLargerThanItsGpuStreamsTheBlocksThatDoNotFitThroughIt) {
  // 100 MB per unit, 10 MB of KV per block; cuda:0 has 900 MB: head and embedding (200), 16
  // blocks' KV (160) and two slots (200) leave room for 3 resident blocks (560 + 3 * 100 = 860).
  const std::vector<PlacementDevice> devices = {placementDevice("cpu:0", 1, 65536, false),
                                                placementDevice("cuda:0", 10, 900)};
  const Placement p = placeStreaming(devices, placementRequest(16));
  ASSERT_TRUE(p.ok) << p.why;
  EXPECT_EQ(p.unitDevice, std::vector<int>(18, 1));
  std::vector<bool> want(18, true);
  for (int u : {0, 1, 2, 3, 17}) want[size_t(u)] = false;
  EXPECT_EQ(p.streamed, want);
  EXPECT_EQ(p.bytesUsed[1], 860 * kMB);
  // Too small even for the slots, the KV and the ends: no streaming placement.
  const Placement none = placeStreaming({placementDevice("cuda:0", 10, 400)}, placementRequest(16));
  EXPECT_FALSE(none.ok);
  EXPECT_NE(none.why.find("cuda:0 cannot hold"), std::string::npos) << none.why;
  // Only a CPU (weights in the file): nothing to stream through.
  EXPECT_FALSE(placeStreaming({placementDevice("cpu:0", 1, 65536, false)}, placementRequest(16)).ok);
}

}  // namespace
}  // namespace jitllm::policies
