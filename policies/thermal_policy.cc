#include "policies/thermal_policy.h"

#include <cmath>
#include <cstdio>

#include "policies/moves.h"

namespace jitllm::policies {
namespace {

std::string degrees(double c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f °C", c);
  return buf;
}

}  // namespace

void ThermalPolicy::updateHeat(const Snapshot& s) {
  for (const DeviceState& d : s.devices) {
    if (std::isnan(d.temperatureC)) continue;
    Heat& h = heat_[d.id];
    if (!h.hot) {
      if (d.temperatureC > config_.hotC) h = {true, -1};
    } else if (d.temperatureC < config_.coolC) {
      if (h.coolSinceMs < 0) h.coolSinceMs = s.nowMs;
      if (s.nowMs - h.coolSinceMs >= config_.coolForMs) h = {false, -1};
    } else {
      h.coolSinceMs = -1;  // the dip did not last
    }
  }
}

std::vector<Action> ThermalPolicy::plan(const Snapshot& s) {
  updateHeat(s);
  std::vector<Action> actions;
  MoveBudget budget;
  auto isHot = [&](const DeviceId& id) { return heat_.count(id) && heat_.at(id).hot; };
  auto notHot = [&](const DeviceState& d) { return !isHot(d.id); };

  // Layers come back once their device has cooled for long enough. (Before the evacuations:
  // those of this tick have not happened yet, so their units are still at home.)
  for (const ModelState& m : s.models) {
    if (m.migrating || !m.resident) continue;
    std::map<DeviceId, std::vector<int>> back;  // home device -> units to bring back, in order
    for (int u = 0; u < int(m.units.size()); u++) {
      auto it = evacuated_.find({m.name, u});
      if (it == evacuated_.end()) continue;
      const UnitState& unit = m.units[size_t(u)];
      if (unit.device != it->second.where || !unit.movable()) {
        // Back home (a return this policy planned has happened), or moved or pinned by someone
        // else, or the move away never happened: either way no longer ours to bring back.
        evacuated_.erase(it);
        continue;
      }
      const DeviceState* home = s.device(it->second.home);
      if (home && !isHot(home->id)) back[home->id].push_back(u);
    }
    for (const auto& [home, units] : back) {
      const DeviceState& h = *s.device(home);
      for (size_t i = 0, j = 0; i < units.size(); i = j) {
        // units[i..j) is a run of consecutive units.
        for (j = i + 1; j < units.size() && units[j] == units[j - 1] + 1;) j++;
        UnitRun run{units[i], units[j - 1], 0};
        for (int u = run.first; u <= run.last; u++) run.bytes += m.units[size_t(u)].bytes;
        const size_t planned = budget.count(home) ? budget.at(home) : 0;
        if (h.memoryFree() < planned + run.bytes + size_t(config_.headroom * double(h.memoryTotal))) continue;
        budget[home] += run.bytes;
        actions.push_back({ActionKind::kMigrate, m.name, run.first, run.last, home,
                           home.str() + " back below " + degrees(config_.coolC) + " for " +
                               std::to_string(config_.coolForMs / 1000) + " s"});
        // The records stay until the units are seen at home: the scheduler may carry out only
        // part of a plan in one tick (one migration per model at a time).
      }
    }
  }
  // Layers leave hot devices.
  for (const DeviceState& d : s.devices) {
    if (!isHot(d.id)) continue;
    for (const ModelState& m : s.models) {
      if (m.migrating || !m.resident) continue;
      for (const UnitRun& run : movableRuns(m, d.id)) {
        const DeviceState* target = pickTarget(s, d.id, run.bytes, config_.headroom, notHot, budget);
        if (!target) continue;  // nowhere cooler with room: it stays (and throttles)
        actions.push_back({ActionKind::kMigrate, m.name, run.first, run.last, target->id,
                           d.id.str() + " at " + degrees(d.temperatureC) + " > " + degrees(config_.hotC)});
        for (int u = run.first; u <= run.last; u++) evacuated_[{m.name, u}] = {d.id, target->id};
      }
    }
  }

  return actions;
}

}  // namespace jitllm::policies
