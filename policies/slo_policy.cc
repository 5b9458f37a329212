#include "policies/slo_policy.h"

#include <algorithm>

namespace jitllm::policies {
namespace {

// A device no model has a unit on (a replica's place).
bool idle(const Snapshot& s, const DeviceState& d) {
  for (const ModelState& m : s.models) {
    for (const UnitState& u : m.units) {
      for (const DeviceId& id : u.devices()) {
        if (id == d.id) return false;
      }
    }
  }
  return true;
}

// Every block split alike (what this policy and jitllmctl tp make): blocks pinned by a user, or
// split unevenly, are not this policy's to change. (A split block's pin is the split's own.)
bool blocksAlike(const ModelState& m) {
  const UnitState& block = m.units[1];
  for (size_t u = 1; u + 1 < m.units.size(); u++) {
    const UnitState& unit = m.units[u];
    if (unit.device != block.device || unit.split != block.split || (unit.pinned && unit.split.empty())) return false;
  }
  return true;
}

// Replies of the other tiers running on `m` and its replicas.
int otherReplies(const Snapshot& s, const ModelState& m) {
  int others = 0;
  for (const ModelState& r : s.models) {
    if (&r != &m && r.replicaOf != m.name) continue;
    for (const TierState& t : r.tiers) others += t.tier == Tier::kInteractive ? 0 : t.active;
  }
  return others;
}

}  // namespace

std::vector<Action> SloPolicy::plan(const Snapshot& s) {
  std::vector<Action> actions;
  for (const ModelState& m : s.models) {
    if (m.units.size() < 3) continue;
    if (!m.replicaOf.empty()) {
      // A replica idle for coolForMs goes; its model serves alone again.
      Memory& mem = memory_[m.name];
      if (mem.lastSwitchMs < 0) mem.lastSwitchMs = s.nowMs;  // first seen: counts from now
      if (m.activeSessions == 0 && !m.migrating &&
          s.nowMs - std::max(m.lastUsedMs, mem.lastSwitchMs) >= config_.coolForMs) {
        actions.push_back({ActionKind::kDropReplica, m.name, 0, 0, std::nullopt,
                           "no reply for " + std::to_string(config_.coolForMs / 1000) + " s: " + m.replicaOf +
                               " serves alone again"});
      }
      continue;
    }
    Memory& mem = memory_[m.name];
    const TierState* interactive = m.tier(Tier::kInteractive);
    const uint64_t finished = interactive ? interactive->finished : 0, met = interactive ? interactive->met : 0;
    const uint64_t recentFinished = finished - std::min(finished, mem.finished);
    const uint64_t recentMissed = recentFinished - std::min(recentFinished, met - std::min(met, mem.met));
    mem.finished = finished;
    mem.met = met;
    const bool busy = interactive && interactive->active > 0;
    if (busy) mem.lastInteractiveMs = s.nowMs;
    if (m.migrating || !m.resident) continue;
    if (mem.lastSwitchMs >= 0 && s.nowMs - mem.lastSwitchMs < config_.coolForMs) continue;
    if (!blocksAlike(m)) continue;
    const std::vector<DeviceId> current = m.units[1].devices();
    const bool missing = recentFinished > 0 && double(recentMissed) > kMissFraction * double(recentFinished);
    std::optional<Action> a;
    if (busy && missing) {
      a = widen(s, m, current);
      if (a) {
        a->reason = "interactive replies missed their targets (" + std::to_string(recentMissed) + " of " +
                    std::to_string(recentFinished) + " since the last tick): splits its blocks over " +
                    std::to_string(a->devices.size()) + " devices";
      }
    } else if (current.size() > 1 && !busy && s.nowMs - mem.lastInteractiveMs >= config_.coolForMs) {
      a = Action{ActionKind::kSplit,
                 m.name,
                 1,
                 int(m.units.size()) - 2,
                 std::nullopt,
                 "no interactive reply for " + std::to_string(config_.coolForMs / 1000) + " s: joins its blocks onto " +
                     current[0].str(),
                 {current[0]}};
    } else if (!missing) {
      a = replicate(s, m, current[0].backend);
    }
    if (!a) continue;
    mem.lastSwitchMs = s.nowMs;
    actions.push_back(std::move(*a));
  }
  return actions;
}

std::optional<Action> SloPolicy::widen(const Snapshot& s, const ModelState& m,
                                       const std::vector<DeviceId>& current) const {
  int want = 0;
  for (int k : m.splits) {
    if (k > int(current.size()) && (want == 0 || k < want)) want = k;
  }
  if (want == 0) return std::nullopt;
  size_t blockBytes = 0;
  for (size_t u = 1; u + 1 < m.units.size(); u++) blockBytes += m.units[u].weightBytes;
  const size_t share = blockBytes / size_t(want);
  // Idle devices of the backend: the model's own first, then the fastest with room.
  std::vector<const DeviceState*> candidates;
  for (const DeviceState& d : s.devices) {
    if (std::find(current.begin(), current.end(), d.id) != current.end()) continue;
    if (d.software || d.id.backend != current[0].backend) continue;
    if (double(d.memoryFree()) < double(share) + config_.headroom * double(d.memoryTotal)) continue;
    candidates.push_back(&d);
  }
  std::sort(candidates.begin(), candidates.end(), [](const DeviceState* x, const DeviceState* y) {
    return x->speed != y->speed ? x->speed > y->speed : x->id < y->id;
  });
  if (int(current.size() + candidates.size()) < want) return std::nullopt;
  Action a{ActionKind::kSplit, m.name, 1, int(m.units.size()) - 2, std::nullopt, "", current};
  for (size_t i = 0; int(a.devices.size()) < want; i++) a.devices.push_back(candidates[i]->id);
  return a;
}

std::optional<Action> SloPolicy::replicate(const Snapshot& s, const ModelState& m, const std::string& backend) const {
  // Throughput: every copy busy with other replies -> one more copy on an idle device.
  int copies = 1;
  for (const ModelState& r : s.models) copies += r.replicaOf == m.name ? 1 : 0;
  const int others = otherReplies(s, m);
  if (others < kReplicaReplies * copies) return std::nullopt;
  size_t bytes = 0;
  for (const UnitState& u : m.units) bytes += u.weightBytes;
  const DeviceState* target = nullptr;
  for (const DeviceState& d : s.devices) {
    if (d.software || d.id.backend != backend || !idle(s, d)) continue;
    if (double(d.memoryFree()) < double(bytes) + config_.headroom * double(d.memoryTotal)) continue;
    if (!target || d.speed > target->speed) target = &d;
  }
  if (!target) return std::nullopt;
  return Action{ActionKind::kReplicate,
                m.name,
                0,
                0,
                target->id,
                std::to_string(others) + " replies on " + std::to_string(copies) + " cop" +
                    (copies == 1 ? "y" : "ies") + ", its interactive targets kept: a replica on " + target->id.str() +
                    " shares them"};
}

}  // namespace jitllm::policies
