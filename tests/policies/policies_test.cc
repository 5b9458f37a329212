// Scenario tests of the scheduling policies: scripted telemetry on a virtual clock (no sleeps),
// each tick's plan applied to the snapshot the way the scheduler would, so sequences play out.
#include <gtest/gtest.h>

#include "policies/online_policy.h"
#include "policies/policy.h"
#include "policies/pressure_policy.h"
#include "policies/slo_policy.h"
#include "policies/thermal_policy.h"

namespace jitllm::policies {
namespace {

constexpr size_t kGB = size_t(1) << 30;

DeviceId id(const char* text) { return DeviceId::parse(text); }

DeviceState device(const char* name, double speed, size_t totalGB, bool software = false) {
  DeviceState d;
  d.id = id(name);
  d.speed = speed;
  d.memoryTotal = totalGB * kGB;
  d.software = software;
  return d;
}

// A Llama-3.2-3B-like model: token_embd, 28 blocks, output; `unitBytes` each, all on `where`.
ModelState model(const std::string& name, const char* where, size_t unitBytes, int blocks = 28) {
  ModelState m;
  m.name = name;
  m.units.push_back({"token_embd", id(where), unitBytes});
  for (int b = 0; b < blocks; b++) m.units.push_back({"blk." + std::to_string(b), id(where), unitBytes});
  m.units.push_back({"output", id(where), unitBytes});
  return m;
}

// The world a scheduler would keep: it recomputes memory use from placement and applies plans.
struct World {
  Snapshot s;
  void recount() {
    for (DeviceState& d : s.devices) {
      d.memoryUsed = 0;
      for (const ModelState& m : s.models) {
        if (!m.resident) continue;
        for (const UnitState& u : m.units) d.memoryUsed += u.wholeOn(d.id) ? u.bytes : 0;
        d.memoryUsed += m.idleKvOn(d.id);  // (kept apart from the units' bytes here)
      }
    }
  }
  void apply(const std::vector<Action>& actions) {
    for (const Action& a : actions) {
      for (ModelState& m : s.models) {
        if (m.name != a.model) continue;
        if (a.kind == ActionKind::kPageOut) {
          m.resident = false;
        } else if (a.kind == ActionKind::kParkKv) {
          std::erase_if(m.idleKv, [&](const auto& e) { return e.first == a.target; });
        } else if (a.kind == ActionKind::kReplicate) {
          ModelState r = m;
          r.name = m.name + "#" +
                   std::to_string(1 +
                                  std::count_if(s.models.begin(), s.models.end(),
                                                [&](const auto& x) { return x.replicaOf == m.name; }) +
                                  1);
          r.replicaOf = m.name;
          r.tiers.clear();
          for (UnitState& u : r.units) u = {u.name, *a.target, u.bytes, std::nullopt, u.weightBytes};
          s.models.push_back(r);
          break;  // (s.models may have moved)
        } else if (a.kind == ActionKind::kDropReplica) {
          const std::string name = m.name;
          std::erase_if(s.models, [&](const ModelState& x) { return x.name == name; });
          break;
        } else if (a.kind == ActionKind::kSplit) {
          for (int u = a.first; u <= a.last; u++) {
            m.units[size_t(u)].device = a.devices.front();
            m.units[size_t(u)].split = a.devices.size() > 1 ? a.devices : std::vector<DeviceId>{};
          }
        } else {
          for (int u = a.first; u <= a.last; u++) {
            ASSERT_TRUE(m.units[size_t(u)].movable()) << "a policy moved pinned " << m.units[size_t(u)].name;
            m.units[size_t(u)].device = *a.target;
          }
        }
      }
    }
    recount();
  }
  void setTemperature(const char* name, double c) {
    for (DeviceState& d : s.devices) {
      if (d.id == id(name)) d.temperatureC = c;
    }
  }
  // One tick at `nowMs`: plan, apply, return the plan.
  std::vector<Action> tick(Policy& p, int64_t nowMs) {
    s.nowMs = nowMs;
    auto actions = p.plan(s);
    apply(actions);
    return actions;
  }
  // Where a unit runs, as ps shows it: "cuda:0", a split block "cuda:0+cuda:1".
  std::string where(const std::string& modelName, int unit) const {
    std::string out;
    for (const ModelState& m : s.models) {
      if (m.name != modelName) continue;
      for (const DeviceId& d : m.units[size_t(unit)].devices()) out += (out.empty() ? "" : "+") + d.str();
    }
    return out;
  }
};

World twoGpusAndACpu() {
  World w;
  w.s.devices = {device("cuda:0", 10, 80), device("cuda:1", 10, 80), device("cpu:0", 1, 64)};
  w.s.devices[0].temperatureC = 60;
  w.s.devices[1].temperatureC = 55;
  w.s.models = {model("llama3b", "cuda:0", kGB / 10)};
  w.recount();
  return w;
}

TEST(ThermalPolicy, AHotDeviceLosesItsLayersAndGetsThemBackOnlyAfterCoolingLongEnough) {
  World w = twoGpusAndACpu();
  ThermalPolicy p({});
  EXPECT_TRUE(w.tick(p, 0).empty());
  w.setTemperature("cuda:0", 88);
  auto away = w.tick(p, 1000);
  ASSERT_EQ(away.size(), 1u);
  EXPECT_EQ(away[0], (Action{ActionKind::kMigrate, "llama3b", 0, 29, id("cuda:1"), "cuda:0 at 88 °C > 85 °C"}));
  // Between the thresholds nothing moves; below coolC it waits coolForMs (30 s) first.
  w.setTemperature("cuda:0", 80);
  EXPECT_TRUE(w.tick(p, 2000).empty());
  w.setTemperature("cuda:0", 70);
  EXPECT_TRUE(w.tick(p, 3000).empty());
  EXPECT_TRUE(w.tick(p, 32000).empty());
  auto back = w.tick(p, 33000);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0],
            (Action{ActionKind::kMigrate, "llama3b", 0, 29, id("cuda:0"), "cuda:0 back below 75 °C for 30 s"}));
  EXPECT_EQ(w.where("llama3b", 15), "cuda:0");
  EXPECT_TRUE(w.tick(p, 34000).empty());
}

TEST(ThermalPolicy, AnOscillatingTemperatureMovesLayersOnceAndNeverFlaps) {
  World w = twoGpusAndACpu();
  ThermalPolicy p({});
  int moves = 0;
  for (int64_t t = 0; t < 600000; t += 5000) {
    w.setTemperature("cuda:0", (t / 5000) % 2 ? 70 : 90);  // 90 °C, then 70 °C, every 5 s
    moves += int(w.tick(p, t).size());
  }
  EXPECT_EQ(moves, 1);
  EXPECT_EQ(w.where("llama3b", 0), "cuda:1");
}

TEST(ThermalPolicy, PinnedLayersStayOnAHotDeviceAndTheRestMoveAroundThem) {
  World w = twoGpusAndACpu();
  for (int u = 1; u <= 4; u++) w.s.models[0].units[size_t(u)].pinned = id("cuda:0");
  ThermalPolicy p({});
  w.setTemperature("cuda:0", 90);
  auto away = w.tick(p, 0);
  ASSERT_EQ(away.size(), 2u);
  EXPECT_EQ(std::make_pair(away[0].first, away[0].last), std::make_pair(0, 0));
  EXPECT_EQ(std::make_pair(away[1].first, away[1].last), std::make_pair(5, 29));
  for (int u = 1; u <= 4; u++) EXPECT_EQ(w.where("llama3b", u), "cuda:0");
}

TEST(ThermalPolicy, LayersGoOnlyWhereItIsCoolAndThereIsRoom) {
  World w = twoGpusAndACpu();
  w.setTemperature("cuda:1", 92);
  w.s.devices[2].memoryTotal = kGB;  // the CPU has no room for 3 GB
  ThermalPolicy p({});
  w.setTemperature("cuda:0", 90);
  EXPECT_TRUE(w.tick(p, 0).empty()) << "both GPUs are hot and the CPU is full: nothing can move";
  w.s.devices[2].memoryTotal = 64 * kGB;
  auto away = w.tick(p, 1000);
  ASSERT_EQ(away.size(), 1u);
  EXPECT_EQ(away[0].target, id("cpu:0"));
}

World threeModelsOnOneGpu(int active) {
  World w;
  w.s.devices = {device("cuda:0", 10, 100), device("cuda:1", 10, 100)};
  for (const char* n : {"a", "b", "c"}) w.s.models.push_back(model(n, "cuda:0", 32 * kGB / 30));
  w.s.models[0].lastUsedMs = 100;
  w.s.models[1].lastUsedMs = 500;
  w.s.models[2].lastUsedMs = 900;
  for (int i = 0; i < active; i++) w.s.models[size_t(2 - i)].activeSessions = 1;
  // Everything else on cuda:1 fills it, so a move is not the easy way out.
  w.recount();
  return w;
}

TEST(PressurePolicy, AFullDevicePagesOutTheLeastRecentlyUsedIdleModelFirst) {
  World w = threeModelsOnOneGpu(1);  // c is busy; a was used longest ago
  PressurePolicy p({});
  auto plan = w.tick(p, 1000);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, ActionKind::kPageOut);
  EXPECT_EQ(plan[0].model, "a");
  EXPECT_NE(plan[0].reason.find("cuda:0 at 96% of its memory > 92%"), std::string::npos) << plan[0].reason;
  EXPECT_TRUE(w.tick(p, 2000).empty()) << "below the threshold now";
}

TEST(PressurePolicy, IdleSessionsKvIsParkedBeforeAnyModelIsPagedOut) {
  World w = threeModelsOnOneGpu(1);  // c is busy; a was used longest ago, then b
  w.s.models[1].idleKv = {{id("cuda:0"), 1 * kGB}};
  w.s.models[2].idleKv = {{id("cuda:0"), 2 * kGB}, {id("cuda:1"), 5 * kGB}};
  w.recount();  // cuda:0 at 99%: parking 3 GB is not enough, so `a` goes too
  PressurePolicy p({});
  auto plan = w.tick(p, 1000);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].kind, ActionKind::kParkKv);
  EXPECT_EQ(plan[0].model, "b");  // least recently used first, busy models' idle sessions too
  EXPECT_EQ(plan[0].target, id("cuda:0"));
  EXPECT_EQ(plan[1].kind, ActionKind::kParkKv);
  EXPECT_EQ(plan[1].model, "c");
  EXPECT_EQ(plan[2].kind, ActionKind::kPageOut);
  EXPECT_EQ(plan[2].model, "a");
  EXPECT_EQ(w.s.models[2].idleKvOn(id("cuda:1")), 5 * kGB) << "cuda:1 is not full: its idle KV stays";
  EXPECT_TRUE(w.tick(p, 2000).empty());
}

TEST(PressurePolicy, WhenParkingIdleKvMakesEnoughRoomNoModelIsPagedOut) {
  World w = threeModelsOnOneGpu(1);
  w.s.models[2].idleKv = {{id("cuda:0"), 20 * kGB}};
  w.s.devices[0].memoryTotal = 120 * kGB;  // 116 of 120 GB used: 16 GB over the low mark
  w.recount();
  PressurePolicy p({});
  auto plan = w.tick(p, 1000);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, ActionKind::kParkKv);
  EXPECT_EQ(plan[0].model, "c");
  EXPECT_TRUE(w.s.models[0].resident);
}

TEST(PressurePolicy, WithNoIdleModelLeftLayersOfBusyModelsMoveWhereThereIsRoom) {
  World w = threeModelsOnOneGpu(3);
  PressurePolicy p({});
  auto plan = w.tick(p, 1000);
  ASSERT_FALSE(plan.empty());
  for (const Action& a : plan) {
    EXPECT_EQ(a.kind, ActionKind::kMigrate);
    EXPECT_EQ(a.target, id("cuda:1"));
  }
  EXPECT_LE(w.s.devices[0].memoryFraction(), 0.80);
  EXPECT_TRUE(w.tick(p, 2000).empty());
}

TEST(PressurePolicy, APinnedLayerKeepsItsModelResident) {
  World w = threeModelsOnOneGpu(0);
  w.s.models[0].units[3].pinned = id("cuda:0");  // a is the LRU model, but pinned
  PressurePolicy p({});
  auto plan = w.tick(p, 1000);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].model, "b");
}

TEST(PressurePolicy, APagedOutModelInUseGoesHomeOneRunAtATimeWhenThereIsRoom) {
  World w;
  w.s.devices = {device("cuda:0", 10, 8), device("cpu:0", 1, 64)};
  ModelState m = model("llama3b", "cpu:0", 0, 4);
  for (UnitState& u : m.units) u.weightBytes = kGB / 2;
  m.resident = false;
  m.home.assign(m.units.size(), id("cuda:0"));
  m.home.back() = id("cpu:0");  // its head ran on the CPU already
  m.activeSessions = 1;
  w.s.models = {m};
  w.recount();
  PressurePolicy p({});
  auto plan = w.tick(p, 1000);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, ActionKind::kMigrate);
  EXPECT_EQ(std::make_pair(plan[0].first, plan[0].last), std::make_pair(0, 4));
  EXPECT_EQ(plan[0].target, id("cuda:0"));
  EXPECT_EQ(plan[0].reason, "llama3b is in use again: paging token_embd-blk.3 back in");
  // Idle, it stays out; a device without room keeps it out too.
  w.s.models[0].units[1].device = id("cpu:0");
  w.s.models[0].activeSessions = 0;
  EXPECT_TRUE(w.tick(p, 2000).empty());
  w.s.models[0].activeSessions = 1;
  w.s.devices[0].memoryTotal = kGB / 2;
  EXPECT_TRUE(w.tick(p, 3000).empty());
  w.s.devices[0].memoryTotal = 8 * kGB;
  // Room that resident models were promised for their sessions' KV is not room for a page-in.
  w.s.devices[0].promised = 7 * kGB + kGB / 2;
  EXPECT_TRUE(w.tick(p, 3500).empty());
  w.s.devices[0].promised = 0;
  plan = w.tick(p, 4000);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(std::make_pair(plan[0].first, plan[0].last), std::make_pair(1, 1));
}

TEST(OnlinePolicy, ADeviceThatArrivesTakesTheLayersOfSlowerDevices) {
  World w;
  w.s.devices = {device("cpu:0", 1, 64)};
  w.s.models = {model("llama3b", "cpu:0", kGB / 10)};
  w.s.models[0].units[0].pinned = id("cpu:0");
  w.recount();
  OnlinePolicy p({});
  EXPECT_TRUE(w.tick(p, 0).empty()) << "the first snapshot only says what exists";
  EXPECT_TRUE(w.tick(p, 1000).empty());
  w.s.devices.push_back(device("cuda:0", 10, 80));
  auto plan = w.tick(p, 2000);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0],
            (Action{ActionKind::kMigrate, "llama3b", 1, 29, id("cuda:0"), "cuda:0 arrived and is faster than cpu:0"}));
  EXPECT_EQ(w.where("llama3b", 0), "cpu:0") << "pinned";
  EXPECT_TRUE(w.tick(p, 3000).empty());
  // It goes away and comes back: an arrival again, but nothing is slower-placed now.
  w.s.devices.pop_back();
  EXPECT_TRUE(w.tick(p, 4000).empty());
}

TEST(OnlinePolicy, ASoftwareDeviceArrivingTakesNothingFromARealOne) {
  World w;
  w.s.devices = {device("cuda:0", 10, 80)};
  w.s.models = {model("m", "cuda:0", kGB / 10)};
  w.recount();
  OnlinePolicy p({});
  w.tick(p, 0);
  w.s.devices.push_back(device("vulkan:0", 100, 80, /*software=*/true));
  EXPECT_TRUE(w.tick(p, 1000).empty());
}

// The slo policy's world: llama3b on cuda:0 of four GPUs, its interactive tier's counters scripted.
struct SloWorld {
  World w;
  SloPolicy policy{PolicyConfig{}};
  SloWorld() {
    w.s.devices = {device("cuda:0", 10, 80), device("cuda:1", 10, 80),   device("cuda:2", 10, 80),
                   device("cuda:3", 10, 80), device("vulkan:0", 20, 80), device("cpu:0", 1, 64)};
    w.s.models = {model("llama3b", "cuda:0", kGB / 10)};
    for (auto& u : w.s.models[0].units) u.weightBytes = kGB / 10;
    w.s.models[0].splits = {2, 4};
    w.s.models[0].tiers = {{Tier::kInteractive, 0, 0, 0}, {Tier::kBatch, 4, 0, 0}};
    w.recount();
  }
  // `active` interactive replies now; `finished` more of them ended since the last tick, `met` of
  // which met their targets.
  std::vector<Action> tick(int64_t nowMs, int active, uint64_t finished, uint64_t met) {
    TierState& t = w.s.models[0].tiers[0];
    t.active = active;
    t.finished += finished;
    t.met += met;
    return w.tick(policy, nowMs);
  }
  std::string blocks() const { return w.where("llama3b", 1); }
};

TEST(SloPolicy, MissedInteractiveTargetsSplitTheBlocksOverIdleGpusOfItsBackendAndIdleJoinsThemBack) {
  SloWorld s;
  EXPECT_TRUE(s.tick(0, 2, 10, 10).empty()) << "every interactive reply met its targets";
  EXPECT_TRUE(s.tick(1000, 2, 10, 9).empty()) << "one miss in ten is within kMissFraction";
  auto plan = s.tick(2000, 2, 10, 5);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, ActionKind::kSplit);
  EXPECT_EQ(plan[0].devices, (std::vector<DeviceId>{id("cuda:0"), id("cuda:1")})) << "its own backend, not vulkan:0";
  EXPECT_EQ(plan[0].first, 1);
  EXPECT_EQ(plan[0].last, 28);
  EXPECT_EQ(s.blocks(), "cuda:0+cuda:1");
  EXPECT_EQ(s.w.where("llama3b", 0), "cuda:0") << "the embedding and head are not split";
  // Still missing, but within the hold after a switch: nothing, then 4.
  EXPECT_TRUE(s.tick(10000, 2, 10, 0).empty());
  plan = s.tick(40000, 2, 10, 0);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].devices.size(), 4u);
  EXPECT_EQ(s.blocks(), "cuda:0+cuda:1+cuda:2+cuda:3");
  EXPECT_TRUE(s.tick(80000, 2, 10, 0).empty()) << "4 is the most its heads allow here";
  // Interactive replies stop: after coolForMs without one, the blocks join back onto cuda:0.
  EXPECT_TRUE(s.tick(81000, 0, 0, 0).empty());
  EXPECT_TRUE(s.tick(100000, 0, 0, 0).empty());
  plan = s.tick(111000, 0, 0, 0);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].devices, (std::vector<DeviceId>{id("cuda:0")}));
  EXPECT_EQ(s.blocks(), "cuda:0");
}

TEST(SloPolicy, BatchLoadWithInteractiveTargetsKeptGetsReplicasOnIdleGpusThatGoWhenIdle) {
  SloWorld s;
  s.w.s.models[0].tiers[1].active = 16;
  auto plan = s.tick(0, 1, 10, 10);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, ActionKind::kReplicate);
  EXPECT_EQ(plan[0].target, id("cuda:1")) << "an idle GPU of its backend";
  ASSERT_EQ(s.w.s.models.size(), 2u);
  EXPECT_EQ(s.w.s.models[1].replicaOf, "llama3b");
  EXPECT_TRUE(s.tick(10000, 1, 10, 10).empty()) << "one change per cool_for_ms";
  // 16 replies over two copies is 8 each: one more.
  plan = s.tick(31000, 1, 10, 10);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].target, id("cuda:2"));
  // Load gone: each replica goes once it ran nothing for cool_for_ms (counted from when the policy
  // first saw it, before it ran anything): llama3b#2 (seen at 10 s) at 50 s, llama3b#3 at 81 s.
  s.w.s.models[0].tiers[1].active = 0;
  EXPECT_TRUE(s.tick(35000, 0, 0, 0).empty());
  plan = s.tick(50000, 0, 0, 0);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, ActionKind::kDropReplica);
  EXPECT_EQ(plan[0].model, "llama3b#2");
  plan = s.tick(81000, 0, 0, 0);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].model, "llama3b#3");
  EXPECT_EQ(s.w.s.models.size(), 1u);
}

TEST(SloPolicy, NoSplitWithoutRoomOrWhereTheHeadsDoNotSplitOrBlocksArePinned) {
  {
    SloWorld s;
    for (auto& d : s.w.s.devices) {
      if (d.id != id("cuda:0")) d.memoryTotal = kGB;  // every other GPU too small for half the blocks
    }
    s.tick(0, 2, 0, 0);
    EXPECT_TRUE(s.tick(1000, 2, 10, 0).empty());
  }
  {
    SloWorld s;
    s.w.s.models[0].splits.clear();
    s.tick(0, 2, 0, 0);
    EXPECT_TRUE(s.tick(1000, 2, 10, 0).empty());
  }
  {
    SloWorld s;
    s.w.s.models[0].units[3].pinned = id("cuda:0");
    s.tick(0, 2, 0, 0);
    EXPECT_TRUE(s.tick(1000, 2, 10, 0).empty());
  }
  {
    SloWorld s;  // missing targets while no interactive reply runs any more: nothing to gain
    s.tick(0, 0, 0, 0);
    EXPECT_TRUE(s.tick(1000, 0, 10, 0).empty());
  }
}

TEST(Policies, NamedPoliciesExistAndNeverActTwiceOnOneModelInATick) {
  for (const std::string& n : policyNames()) EXPECT_NE(makePolicy(n, {}), nullptr) << n;
  EXPECT_EQ(makePolicy("fastest", {}), nullptr);
  // Hot and full at once: the thermal composite moves the model once, not once per reason.
  World w = threeModelsOnOneGpu(3);
  auto p = makePolicy("thermal", {});
  w.tick(*p, 0);
  w.setTemperature("cuda:0", 95);
  w.setTemperature("cuda:1", 50);
  auto plan = w.tick(*p, 1000);
  std::map<std::string, int> perModel;
  for (const Action& a : plan) perModel[a.model]++;
  for (const auto& [m, n] : perModel) EXPECT_EQ(n, 1) << m;
}

}  // namespace
}  // namespace jitllm::policies
