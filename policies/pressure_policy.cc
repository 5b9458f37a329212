#include "policies/pressure_policy.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "policies/moves.h"

namespace jitllm::policies {
namespace {

std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", f * 100);
  return buf;
}

size_t bytesOn(const ModelState& m, const DeviceId& device) {
  size_t n = 0;
  for (const UnitState& u : m.units) n += u.wholeOn(device) ? u.bytes : 0;
  return n;
}

bool pinnedOn(const ModelState& m, const DeviceId& device) {
  for (const UnitState& u : m.units) {
    if (u.wholeOn(device) && u.pinned) return true;
  }
  return false;
}

}  // namespace

std::vector<Action> PressurePolicy::plan(const Snapshot& s) {
  std::vector<Action> actions;
  MoveBudget budget;
  std::set<std::string> pagedOut;
  // A paged-out model someone uses again goes home, one run of units at a time, where the device
  // is there and has room below the low mark.
  for (const ModelState& m : s.models) {
    if (m.resident || m.migrating || m.activeSessions == 0 || m.home.size() != m.units.size()) continue;
    pagedOut.insert(m.name);  // not a candidate for paging out below
    for (int u = 0; u < int(m.units.size()); u++) {
      const DeviceId& home = m.home[size_t(u)];
      if (m.units[size_t(u)].device == home || !m.units[size_t(u)].movable() || !s.device(home)) continue;
      UnitRun run{u, u, m.units[size_t(u)].bytes + m.units[size_t(u)].weightBytes};
      while (run.last + 1 < int(m.units.size()) && m.home[size_t(run.last + 1)] == home &&
             m.units[size_t(run.last + 1)].device == m.units[size_t(u)].device &&
             m.units[size_t(run.last + 1)].movable()) {
        run.last++;
        run.bytes += m.units[size_t(run.last)].bytes + m.units[size_t(run.last)].weightBytes;
      }
      const DeviceState* target = pickTarget(
          s, m.units[size_t(u)].device, run.bytes, config_.headroom,
          [&](const DeviceState& t) { return t.id == home && t.memoryFraction() < config_.pressureLow; }, budget);
      if (target) {
        actions.push_back({ActionKind::kMigrate, m.name, run.first, run.last, home,
                           m.name + " is in use again: paging " + runName(m, run) + " back in"});
      }
      break;  // one run per tick; the next tick plans the rest from where things are then
    }
  }
  for (const DeviceState& d : s.devices) {
    if (d.memoryTotal == 0 || d.memoryFraction() <= config_.pressureHigh) continue;
    const std::string reason =
        d.id.str() + " at " + percent(d.memoryFraction()) + " of its memory > " + percent(config_.pressureHigh);
    const size_t goal = size_t(config_.pressureLow * double(d.memoryTotal));
    size_t used = d.memoryUsed;
    // Idle sessions' KV first: parking it costs nobody a token and it comes back bitwise.
    std::vector<const ModelState*> parkable;
    for (const ModelState& m : s.models) {
      if (!m.migrating && m.idleKvOn(d.id) > 0) parkable.push_back(&m);
    }
    std::sort(parkable.begin(), parkable.end(), [](const ModelState* a, const ModelState* b) {
      return a->lastUsedMs != b->lastUsedMs ? a->lastUsedMs < b->lastUsedMs : a->name < b->name;
    });
    for (const ModelState* m : parkable) {
      if (used <= goal) break;
      actions.push_back({ActionKind::kParkKv, m->name, 0, 0, d.id, reason});
      pagedOut.insert(m->name);  // one action per model per tick
      used -= std::min(used, m->idleKvOn(d.id));
    }
    // Idle models first, least recently used first. A pinned layer keeps its model resident.
    std::vector<const ModelState*> idle;
    for (const ModelState& m : s.models) {
      if (m.resident && !m.migrating && m.activeSessions == 0 && bytesOn(m, d.id) > 0 && !pinnedOn(m, d.id) &&
          !pagedOut.count(m.name)) {
        idle.push_back(&m);
      }
    }
    std::sort(idle.begin(), idle.end(), [](const ModelState* a, const ModelState* b) {
      return a->lastUsedMs != b->lastUsedMs ? a->lastUsedMs < b->lastUsedMs : a->name < b->name;
    });
    for (const ModelState* m : idle) {
      if (used <= goal) break;
      actions.push_back({ActionKind::kPageOut, m->name, 0, int(m->units.size()) - 1, std::nullopt, reason});
      pagedOut.insert(m->name);
      used -= std::min(used, bytesOn(*m, d.id));
    }
    // Then layers of busy models move where there is room.
    for (const ModelState& m : s.models) {
      if (used <= goal) break;
      if (!m.resident || m.migrating || pagedOut.count(m.name)) continue;
      for (const UnitRun& run : movableRuns(m, d.id)) {
        if (used <= goal) break;
        const DeviceState* target = pickTarget(
            s, d.id, run.bytes, config_.headroom,
            [&](const DeviceState& t) { return t.memoryFraction() < config_.pressureLow; }, budget);
        if (!target) continue;
        actions.push_back({ActionKind::kMigrate, m.name, run.first, run.last, target->id, reason});
        used -= std::min(used, run.bytes);
      }
    }
  }
  return actions;
}

}  // namespace jitllm::policies
