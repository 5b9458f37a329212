#include "policies/online_policy.h"

#include "policies/moves.h"

namespace jitllm::policies {
namespace {

// Whether layers on `from` run faster on `to`.
bool faster(const DeviceState& to, const DeviceState& from) {
  if (from.software != to.software) return from.software;
  return to.speed > from.speed;
}

}  // namespace

std::vector<Action> OnlinePolicy::plan(const Snapshot& s) {
  std::vector<const DeviceState*> arrived;
  std::set<DeviceId> present;
  for (const DeviceState& d : s.devices) {
    present.insert(d.id);
    if (seenFirst_ && !known_.count(d.id)) arrived.push_back(&d);
  }
  known_ = present;
  seenFirst_ = true;

  std::vector<Action> actions;
  MoveBudget budget;
  for (const DeviceState* fresh : arrived) {
    for (const ModelState& m : s.models) {
      if (!m.resident || m.migrating) continue;
      for (const DeviceState& from : s.devices) {
        if (&from == fresh || !faster(*fresh, from)) continue;
        for (const UnitRun& run : movableRuns(m, from.id)) {
          const DeviceState* target = pickTarget(
              s, from.id, run.bytes, config_.headroom, [&](const DeviceState& t) { return &t == fresh; }, budget);
          if (!target) continue;
          actions.push_back({ActionKind::kMigrate, m.name, run.first, run.last, fresh->id,
                             fresh->id.str() + " arrived and is faster than " + from.id.str()});
        }
      }
    }
  }
  return actions;
}

}  // namespace jitllm::policies
