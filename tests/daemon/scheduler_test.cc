// The scheduler against a real DaemonCore (two CPU devices, stories260K) with scripted telemetry
// and a virtual clock: the thermal policy's plan is carried out by live migrations, pins hold,
// and every action is an event with its reason.
#include "daemon/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "daemon/scheduler/scripted_telemetry.h"
#include "daemon/server/daemon_core.h"
#include "tests/daemon/bounded_wait.h"

namespace jitllm::scheduler {
namespace {

const std::string kModels = std::string(JITLLM_SHARED_DIR) + "/models";

// Waits (bounded) until no migration of `host` is requested or running; returns where each unit is.
std::vector<std::string> settled(server::ModelHost& host) {
  std::vector<std::string> where;
  const bool done = jitllm::testing::waitUntil(
      [&] {
        const auto snap = host.snapshot();
        if (snap.migrating) return false;
        for (const auto& u : snap.units) where.push_back(u.device);
        return true;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(10));
  if (done) return where;
  ADD_FAILURE() << "the migration did not finish";
  return {};
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModels + "/stories260K.gguf")) GTEST_SKIP() << "no stories260K";
    server::DaemonConfig config;
    config.devices = "cpu:0,cpu:1";
    config.cpuThreads = 1;
    config.modelDirs = {kModels};
    core_ = std::make_unique<server::DaemonCore>(config);
    server::LoadRequest r;
    r.path = kModels + "/stories260K.gguf";
    r.name = "stories";
    r.devices = {DeviceId{"cpu", 0}};
    host_ = core_->load(r, nullptr);
  }
  std::unique_ptr<server::DaemonCore> core_;
  std::shared_ptr<server::ModelHost> host_;
};

TEST_F(SchedulerTest, AHotDevicesLayersMoveAwayAndComeBackAfterCoolingAndPinsHold) {
  auto script =
      std::make_unique<ScriptedTelemetry>(ScriptedTelemetry::parse("0     cpu:0 temp=60\n"
                                                                   "1000  cpu:0 temp=90   # hot\n"
                                                                   "2000  cpu:0 temp=70   # cooling...\n"
                                                                   "3000  cpu:0 temp=80   # ...not for long enough\n"
                                                                   "4000  cpu:0 temp=70\n",
                                                                   "test-script"));
  policies::PolicyConfig pc;
  pc.coolForMs = 5000;
  // Pin blk.4 where it is: it must stay on the hot device.
  server::MigrationRequest pin;
  pin.layers = "4";
  pin.target = &core_->device("cpu:0");
  pin.force = pin.pinAfter = true;
  ASSERT_TRUE(host_->migrate(pin)->wait(std::chrono::seconds(10)));
  Scheduler s(*core_, std::move(script), pc, "thermal");
  EXPECT_TRUE(s.tick(0).empty());
  // The pin splits the model into two runs; one migration per model at a time, so two ticks.
  auto away = s.tick(1000);
  ASSERT_EQ(away.size(), 1u);
  EXPECT_EQ(away[0].target, DeviceId::parse("cpu:1"));
  EXPECT_EQ(away[0].reason, "cpu:0 at 90 °C > 85 °C");
  settled(*host_);
  auto rest = s.tick(1500);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(std::make_pair(rest[0].first, rest[0].last), std::make_pair(6, 6));
  auto where = settled(*host_);
  ASSERT_EQ(where.size(), 7u);
  for (int u = 0; u < 7; u++) EXPECT_EQ(where[size_t(u)], u == 5 ? "cpu:0" : "cpu:1") << u;
  // 70 °C from 2000, 80 at 3000 (the wait starts over), 70 from 4000: back at 9000, not before.
  for (int64_t t : {2000, 3000, 4000, 8000, 8999}) EXPECT_TRUE(s.tick(t).empty()) << t;
  ASSERT_EQ(s.tick(9000).size(), 1u);
  settled(*host_);
  ASSERT_EQ(s.tick(9500).size(), 1u);
  where = settled(*host_);
  for (int u = 0; u < 7; u++) EXPECT_EQ(where[size_t(u)], "cpu:0") << u;
  // Each action was an event with the policy's reason, and the migrations say why they happened.
  size_t dropped = 0;
  std::string log;
  for (const auto& e : core_->events().subscribe(server::EventHub::kHistory)->take(&dropped)) {
    log += e.what + " " + e.message + "\n";
  }
  EXPECT_NE(log.find("scheduler.acted migrating token_embd-blk.3 of stories to cpu:1: cpu:0 at 90 °C > 85 °C"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("(cpu:0 at 90 °C > 85 °C): pause"), std::string::npos) << log;
  EXPECT_NE(log.find("back below 75 °C for 5 s"), std::string::npos) << log;
}

}  // namespace
}  // namespace jitllm::scheduler

namespace jitllm::scheduler {
namespace {

TEST(ScriptedTelemetry, ValuesHoldUntilALaterLineChangesThemAndBadLinesNameTheirLine) {
  auto t = ScriptedTelemetry::parse(
      "# c\n100 cuda:0 temp=50 mem_used=1G\n300 cuda:0 temp=90\n200 cuda:1 mem_total=2M\n", "s");
  EXPECT_TRUE(std::isnan(t.read("cuda:0", 99).temperatureC));
  EXPECT_EQ(t.read("cuda:0", 100).temperatureC, 50);
  EXPECT_EQ(t.read("cuda:0", 299).memoryUsed, size_t(1) << 30);
  EXPECT_EQ(t.read("cuda:0", 300).temperatureC, 90);
  EXPECT_EQ(t.read("cuda:0", 300).memoryUsed, size_t(1) << 30) << "a key not on the later line keeps its value";
  EXPECT_EQ(t.read("cuda:1", 250).memoryTotal, size_t(2) << 20);
  for (const auto& [text, message] :
       std::vector<std::pair<std::string, std::string>>{{"x cuda:0 temp=1", "s:1: 'x' is not a number"},
                                                        {"\n10 cuda:0", "s:2: no values for cuda:0"},
                                                        {"10 cuda:0 heat=3", "unknown key 'heat'"},
                                                        {"10 cuda:0 temp", "'temp' is not KEY=VALUE"},
                                                        {"10 cuda:0 mem_used=3T", "not a number of bytes"}}) {
    try {
      ScriptedTelemetry::parse(text, "s");
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace jitllm::scheduler
