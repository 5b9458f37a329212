// planLoad: placement on load as jitllmd decides it - which idle models make room first, pins,
// --max-vram, several devices named, and blocks streamed when the model spills.
#include "policies/load_placement.h"

#include <gtest/gtest.h>

#include "tests/policies/placement_fixtures.h"

namespace jitllm::policies {
namespace {

// A model resident on the snapshot's devices: `freesMB` per device.
LoadedModel loaded(const char* name, int64_t lastUsedMs, std::vector<size_t> freesMB) {
  LoadedModel m;
  m.name = name;
  m.lastUsedMs = lastUsedMs;
  for (size_t mb : freesMB) m.frees.push_back(mb * kMB);
  return m;
}

// cpu:0 (weights in the file) listed first, then cuda:0 with `gpuMB` free; a model of `blocks` blocks.
LoadSnapshot cpuAndGpu(size_t gpuMB, int blocks = 4) {
  LoadSnapshot s;
  s.devices = {placementDevice("cpu:0", 1, 65536, false), placementDevice("cuda:0", 10, gpuMB)};
  s.request = placementRequest(blocks);
  return s;
}

// What the daemon does once the room is made: the freed bytes are free, and no model is offered.
LoadSnapshot afterMakingRoom(LoadSnapshot s, size_t device, size_t freedMB) {
  s.devices[device].memoryFree += freedMB * kMB;
  s.models.clear();
  return s;
}

TEST(LoadPlacement, AModelThatFitsTheFastestDeviceGoesThereAndNoIdleModelIsPagedOut) {
  LoadSnapshot s = cpuAndGpu(2000);
  s.models = {loaded("idle", 100, {0, 500})};
  const LoadPlan plan = planLoad(s);
  EXPECT_TRUE(plan.makeRoom.empty());
  ASSERT_TRUE(plan.placement.ok) << plan.placement.why;
  EXPECT_EQ(plan.placement.unitDevice, std::vector<int>(6, 1));
  EXPECT_TRUE(plan.placement.streamed.empty());
  // token_embd and output 100 MB each, 4 blocks of 100 MB weights and 10 MB KV.
  EXPECT_EQ(plan.placed, std::vector<std::string>{"units 0-5 on cuda:0 (640 MiB)"});
}

TEST(LoadPlacement, IdleModelsLeastRecentlyUsedFirstMakeRoomWhenThatGivesTheModelTheFasterDevice) {
  // cuda:0 has 300 MB free: 2 of the 6 units fit, the rest would go to the CPU.
  LoadSnapshot s = cpuAndGpu(300);
  s.models = {loaded("recent", 900, {0, 300}), loaded("old", 100, {0, 200}),    loaded("tie", 900, {0, 10}),
              loaded("busy", 50, {0, 1000}),   loaded("pinned", 50, {0, 1000}), loaded("on-the-cpu", 10, {500, 0})};
  s.models[3].busy = true;
  s.models[4].pinned = true;
  const LoadPlan plan = planLoad(s);
  // With the idle ones gone cuda:0 would have 810 MB: room for all 640 MB of the model.
  ASSERT_EQ(plan.makeRoom.size(), 1u);
  EXPECT_EQ(plan.makeRoom[0], (RoomToMake{1, 640 * kMB, {"old", "recent", "tie"}}))
      << "least recently used first (a tie by name); a busy or pinned model, or one with nothing there, stays";
  EXPECT_FALSE(plan.placement.ok) << "placed only once the room is made";

  // The daemon paged out "old" and "recent" (its page-outs stop once 640 MB are free) and plans again.
  const LoadPlan then = planLoad(afterMakingRoom(s, 1, 500));
  EXPECT_TRUE(then.makeRoom.empty());
  ASSERT_TRUE(then.placement.ok) << then.placement.why;
  EXPECT_EQ(then.placement.unitDevice, std::vector<int>(6, 1));
}

TEST(LoadPlacement, AnIdleModelWhoseRoomWouldMoveNoUnitStaysAndTheModelSpills) {
  LoadSnapshot s = cpuAndGpu(300);
  s.models = {loaded("small", 100, {0, 5})};  // 305 MB: still only token_embd and blk.0 fit
  const LoadPlan plan = planLoad(s);
  EXPECT_TRUE(plan.makeRoom.empty());
  ASSERT_TRUE(plan.placement.ok);
  EXPECT_EQ(plan.placement.unitDevice, (std::vector<int>{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(plan.placed, std::vector<std::string>{"units 0-1 on cuda:0 (210 MiB), 2-5 on cpu:0 (30 MiB)"})
      << "the CPU holds only the KV of its blocks: their weights stay in the file";
}

TEST(LoadPlacement, MaxDeviceBytesCapsWhatTheModelTakesOfEachGpuAndSoWhatIsPagedOutForIt) {
  // Room enough on cuda:0, but --max-vram 350M: 3 units there, no idle model paged out for more.
  LoadSnapshot s = cpuAndGpu(2000);
  s.request.maxDeviceBytes = 350 * kMB;
  s.models = {loaded("idle", 100, {0, 1000})};
  LoadPlan plan = planLoad(s);
  EXPECT_TRUE(plan.makeRoom.empty());
  ASSERT_TRUE(plan.placement.ok);
  EXPECT_EQ(plan.placement.unitDevice, (std::vector<int>{1, 1, 1, 0, 0, 0}));
  // Little free: idle models make room for the capped share only.
  s.devices[1].memoryFree = 100 * kMB;
  plan = planLoad(s);
  ASSERT_EQ(plan.makeRoom.size(), 1u);
  EXPECT_EQ(plan.makeRoom[0].bytes, 320 * kMB);
}

TEST(LoadPlacement, AModelThatSpillsStreamsItsBlocksThroughTheGpuWithSpillStream) {
  // 16 blocks; cuda:0 has 900 MB: placeUnits spills units 8-17 to the CPU.
  LoadSnapshot s = cpuAndGpu(900, 16);
  LoadPlan plan = planLoad(s);
  ASSERT_TRUE(plan.placement.ok);
  EXPECT_TRUE(plan.placement.streamed.empty());
  EXPECT_EQ(plan.placed, std::vector<std::string>{"units 0-7 on cuda:0 (870 MiB), 8-17 on cpu:0 (90 MiB)"});
  s.stream = true;
  plan = planLoad(s);
  ASSERT_TRUE(plan.placement.ok);
  EXPECT_EQ(plan.placement.unitDevice, std::vector<int>(18, 1));
  EXPECT_EQ(std::count(plan.placement.streamed.begin(), plan.placement.streamed.end(), true), 13);
  EXPECT_EQ(plan.placed,
            (std::vector<std::string>{"units 0-17 on cuda:0 (860 MiB)",
                                      "13 of 16 blocks stream through cuda:0 each step (spill = stream)"}));
  // Without the CPU it fits nowhere: streaming is what lets it load.
  s.devices.erase(s.devices.begin());
  plan = planLoad(s);
  ASSERT_TRUE(plan.placement.ok) << plan.placement.why;
  EXPECT_EQ(plan.placed.size(), 2u);
  // Idle models that would make room for all of it go first: paging out beats streaming.
  s.models = {loaded("idle", 100, {1200})};
  plan = planLoad(s);
  ASSERT_EQ(plan.makeRoom.size(), 1u);
  EXPECT_EQ(plan.makeRoom[0], (RoomToMake{0, 1960 * kMB, {"idle"}}));
}

TEST(LoadPlacement, AModelThatFitsNowhereIsRefusedWithWhatIsMissing) {
  LoadSnapshot s;
  s.devices = {placementDevice("cuda:0", 10, 300)};
  s.request = placementRequest(4);
  s.models = {loaded("idle", 100, {50})};  // not enough to make it fit: nothing is paged out
  const LoadPlan plan = planLoad(s);
  EXPECT_TRUE(plan.makeRoom.empty());
  EXPECT_FALSE(plan.placement.ok);
  EXPECT_EQ(plan.placement.why,
            "does not fit: units 2-5 need 430 MiB more than the devices have free (idle models were paged out "
            "first); unload a model or load with a smaller context");
  EXPECT_TRUE(plan.placed.empty());
}

TEST(LoadPlacement, SeveralDevicesNamedKeepTheirSpreadAndPageOutOnlyWhereADeviceLacksRoom) {
  LoadSnapshot s;
  s.devices = {placementDevice("cuda:0", 10, 300), placementDevice("cuda:1", 1, 400)};
  s.request = placementRequest(4);
  s.fixed = {0, 0, 0, 1, 1, 1};  // 320 MB on each
  s.models = {loaded("b", 200, {40, 0}), loaded("a", 100, {10, 0})};
  const LoadPlan plan = planLoad(s);
  ASSERT_EQ(plan.makeRoom.size(), 1u);
  EXPECT_EQ(plan.makeRoom[0], (RoomToMake{0, 320 * kMB, {"a", "b"}}));
  const LoadPlan then = planLoad(afterMakingRoom(s, 0, 50));
  EXPECT_TRUE(then.makeRoom.empty());
  ASSERT_TRUE(then.placement.ok);
  EXPECT_EQ(then.placement.unitDevice, s.fixed) << "the slower device keeps its share: the caller named it";
  // Still short after the page-outs, or short where no idle model has anything: refused, and then
  // nothing is paged out at all.
  const LoadPlan shortAfter = planLoad(afterMakingRoom(s, 0, 10));
  EXPECT_FALSE(shortAfter.placement.ok);
  EXPECT_EQ(shortAfter.placement.why,
            "needs 320 MiB on cuda:0, which has 310 MiB free even with the idle models paged out; name fewer devices "
            "or other ones, or unload a model");
  s.devices[1].memoryFree = 200 * kMB;
  const LoadPlan refused = planLoad(s);
  EXPECT_TRUE(refused.makeRoom.empty());
  EXPECT_FALSE(refused.placement.ok);
  EXPECT_NE(refused.placement.why.find("needs 320 MiB on cuda:1, which has 200 MiB free"), std::string::npos)
      << refused.placement.why;
}

}  // namespace
}  // namespace jitllm::policies
