// Hot-plug of devices the daemon did not have: re-enumeration (DaemonCore::rescanDevices) against
// a real DaemonCore, with the machine's Vulkan devices (lavapipe here) appearing, vanishing and
// coming back through the enumerator; the watcher that decides when to look; and utilisation
// from our own executors.
#include <gtest/gtest.h>

#include <filesystem>

#include "daemon/scheduler/scheduler.h"
#include "daemon/server/device_watcher.h"
#include "engine/devices/builtin_backends.h"
#include "tests/daemon/core_harness.h"

namespace jitllm::scheduler {
namespace {

// What an enumerator reports while the devices are unplugged: no Vulkan device at all, and that
// list is complete (a device missing from it is gone).
Enumeration nothingPluggedIn() {
  Enumeration e;
  e.complete.push_back("vulkan");
  return e;
}

// The machine's Vulkan devices now, as the daemon's enumerator sees them.
Enumeration vulkanNow(std::string* why = nullptr) {
  runtime::BackendRegistry backends = runtime::builtinBackends();
  Backend* vulkan = backends.find("vulkan");
  if (vulkan == nullptr) {
    if (why) *why = "this build has no Vulkan backend";
    return {};
  }
  return vulkan->enumerate(why);  // the enumeration keeps its own instance: it outlives the registry
}

TEST(ReEnumeration, AGpuFoundAfterStartIsAddedOnceLostWhenItVanishesAndBackWhenItReturns) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  std::string why;
  if (vulkanNow(&why).devices.empty()) GTEST_SKIP() << "no Vulkan device here: " << why;
  auto core = makeCore("cpu:0");
  bool plugged = true;
  core->setDeviceEnumerator([&] { return plugged ? vulkanNow() : nothingPluggedIn(); });
  ASSERT_TRUE(core->rescans());
  ASSERT_EQ(core->devices().size(), 1u);

  // Plugged in after start: opened, probed and added, under the first free vulkan:N.
  auto r = core->rescanDevices();
  ASSERT_EQ(r.added, std::vector<DeviceId>({DeviceId{"vulkan", 0}}));
  EXPECT_TRUE(r.lost.empty());
  ASSERT_EQ(core->devices().size(), 2u);
  EXPECT_FALSE(core->device("vulkan:0").info().uuid.empty());
  // Looking again changes nothing: matched by UUID, not added twice.
  r = core->rescanDevices();
  EXPECT_TRUE(r.added.empty() && r.back.empty() && r.lost.empty());
  EXPECT_EQ(core->deviceTable().all().size(), 2u);

  // A model runs on it; then it is no longer enumerated: lost, the model re-placed on the CPU.
  auto host = load(*core, "stories", "vulkan:0");
  const Outcome before = finish(*start(*host, 16));
  ASSERT_FALSE(before.error);
  plugged = false;
  r = core->rescanDevices();
  EXPECT_EQ(r.lost, std::vector<DeviceId>({DeviceId{"vulkan", 0}}));
  EXPECT_TRUE(everyUnitOn(placement(*host), "cpu:0"));
  EXPECT_EQ(core->devices().size(), 1u);
  const Outcome after = finish(*start(*host, 16));
  ASSERT_FALSE(after.error);
  EXPECT_EQ(after.ids, before.ids);

  // Back: the same device (it still answers), online again under its id.
  plugged = true;
  r = core->rescanDevices();
  EXPECT_EQ(r.back, std::vector<DeviceId>({DeviceId{"vulkan", 0}}));
  EXPECT_TRUE(r.added.empty());
  EXPECT_EQ(core->devices().size(), 2u);
  EXPECT_EQ(core->deviceTable().all().size(), 2u);
  const std::string log = eventLog(*core);
  EXPECT_NE(log.find("found by re-enumeration"), std::string::npos) << log;
  EXPECT_NE(log.find("vulkan:0 went away: it is no longer enumerated"), std::string::npos) << log;
  EXPECT_NE(log.find("found again by re-enumeration"), std::string::npos) << log;
}

// A telemetry source that matches devices by UUID (NVML) hears of a device found after it was made.
TEST(ReEnumeration, TheTelemetrySourceHearsOfADeviceFoundLater) {
  std::string why;
  if (vulkanNow(&why).devices.empty()) GTEST_SKIP() << "no Vulkan device here: " << why;
  struct Recording final : TelemetrySource {
    std::vector<std::pair<std::string, std::string>>* added;
    explicit Recording(std::vector<std::pair<std::string, std::string>>* a) : added(a) {}
    DeviceTelemetry read(const std::string&, int64_t) override { return {}; }
    void deviceAdded(const std::string& id, const std::string& uuid) override { added->emplace_back(id, uuid); }
  };
  std::vector<std::pair<std::string, std::string>> added;
  auto core = makeCore("cpu:0");
  core->setDeviceEnumerator([] { return vulkanNow(); });
  Scheduler s(*core, std::make_unique<Recording>(&added), policies::PolicyConfig{}, "balanced");
  s.tick(0);
  EXPECT_TRUE(added.empty()) << "cpu:0 was there when the source was made";
  ASSERT_EQ(core->rescanDevices().added, std::vector<DeviceId>({DeviceId{"vulkan", 0}}));
  s.tick(1);
  s.tick(2);
  ASSERT_EQ(added.size(), 1u) << "told once";
  EXPECT_EQ(added[0].first, "vulkan:0");
  EXPECT_EQ(added[0].second, core->device("vulkan:0").info().uuid);
}

TEST(ReEnumeration, WithoutAnEnumeratorADaemonWithAListOfDevicesKeepsJustThose) {
  auto core = makeCore("cpu:0");
  EXPECT_FALSE(core->rescans());
  const auto r = core->rescanDevices();
  EXPECT_TRUE(r.added.empty() && r.back.empty() && r.lost.empty());
}

// Polls (bounded) until `pred` holds.
template <typename Pred>
bool eventually(Pred pred) {
  return jitllm::testing::waitUntil(pred, std::chrono::seconds(30), std::chrono::milliseconds(1));
}

TEST(DeviceWatcher, LooksOnceNewsHasSettledAndPeriodically) {
  std::atomic<int> looks{0};
  {
    server::DeviceWatcherOptions o;
    o.interval = std::chrono::milliseconds(0);  // news only
    o.settle = std::chrono::milliseconds(30);
    server::DeviceWatcher w([&] { looks++; }, o);
    EXPECT_TRUE(w.monitoring() || !w.problem().empty());
    std::printf("sd-device monitor: %s\n", w.monitoring() ? "running" : w.problem().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(looks.load(), 0) << "no news, no periodic look: no look";
    // A burst of news makes one look, after it has been quiet for `settle`.
    for (int i = 0; i < 5; i++) {
      w.trigger();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(eventually([&] { return looks.load() == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    EXPECT_EQ(looks.load(), 1);
  }
  looks = 0;
  server::DeviceWatcherOptions o;
  o.interval = std::chrono::milliseconds(10);
  o.subsystems = {};
  server::DeviceWatcher w([&] { looks++; }, o);
  EXPECT_FALSE(w.monitoring());
  EXPECT_TRUE(eventually([&] { return looks.load() >= 3; })) << "the periodic look";
}

}  // namespace
}  // namespace jitllm::scheduler

namespace jitllm::scheduler {
namespace {

// Without a vendor counter, a device's utilisation is the share of the time between two ticks
// that step loops spent on it: busy while a reply ran, zero when nothing did.
TEST(Utilisation, ComesFromOurOwnExecutorsWhereNoVendorCounterGivesOne) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto core = makeCore("cpu:0,cpu:1");
  auto host = load(*core, "stories", "cpu:0");
  Scheduler s(*core, std::make_unique<NoTelemetry>(), policies::PolicyConfig{}, "balanced");
  s.tick(0);
  ASSERT_FALSE(finish(*start(*host, 200)).error);
  s.tick(1);
  auto table = core->deviceTable().all();
  EXPECT_GT(table[0].readings.utilization, 0.0);
  EXPECT_LE(table[0].readings.utilization, 1.0);
  EXPECT_EQ(table[1].readings.utilization, 0.0) << "cpu:1 ran nothing";
  s.tick(2);
  EXPECT_EQ(core->deviceTable().all()[0].readings.utilization, 0.0) << "idle since the last tick";
}

}  // namespace
}  // namespace jitllm::scheduler
