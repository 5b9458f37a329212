#include "policies/slo_policy.h"

#include <algorithm>

namespace jitllm::policies {
namespace {

std::vector<std::string> splitDevices(const std::string& device) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= device.size();) {
    const size_t plus = std::min(device.find('+', at), device.size());
    out.push_back(device.substr(at, plus - at));
    at = plus + 1;
  }
  return out;
}

std::string backendOf(const std::string& id) { return id.substr(0, id.find(':')); }

}  // namespace

std::vector<Action> SloPolicy::plan(const Snapshot& s) {
  std::vector<Action> actions;
  for (const ModelState& m : s.models) {
    if (m.units.size() < 3) continue;
    Memory& mem = memory_[m.name];
    const TierState* interactive = m.tier("interactive");
    const uint64_t finished = interactive ? interactive->finished : 0, met = interactive ? interactive->met : 0;
    const uint64_t recentFinished = finished - std::min(finished, mem.finished);
    const uint64_t recentMet = met - std::min(met, mem.met);
    mem.finished = finished;
    mem.met = met;
    const bool busy = interactive && interactive->active > 0;
    if (busy) mem.lastInteractiveMs = s.nowMs;
    if (m.migrating || !m.resident || m.splits.empty()) continue;
    if (mem.lastSwitchMs >= 0 && s.nowMs - mem.lastSwitchMs < config_.coolForMs) continue;
    // Every block split alike (what this policy and jitllmctl tp make): blocks pinned by a user,
    // or split unevenly, are not its to change.
    const std::string& blockDevice = m.units[1].device;
    bool uniform = true;
    for (size_t u = 1; u + 1 < m.units.size(); u++) {
      const bool splitPin = m.units[u].pinned == m.units[u].device && blockDevice.find('+') != std::string::npos;
      uniform = uniform && m.units[u].device == blockDevice && (m.units[u].pinned.empty() || splitPin);
    }
    if (!uniform) continue;
    const std::vector<std::string> current = splitDevices(blockDevice);
    const int degree = int(current.size());
    Action a;
    a.kind = ActionKind::kSplit;
    a.model = m.name;
    a.first = 1;
    a.last = int(m.units.size()) - 2;
    const bool missing =
        recentFinished > 0 && double(recentFinished - recentMet) > kMissFraction * double(recentFinished);
    if (busy && missing) {
      int want = 0;
      for (int k : m.splits) {
        if (k > degree && (want == 0 || k < want)) want = k;
      }
      if (want == 0) continue;
      size_t blockBytes = 0;
      for (size_t u = 1; u + 1 < m.units.size(); u++) blockBytes += m.units[u].weightBytes;
      const size_t share = blockBytes / size_t(want);
      // Idle devices of the backend: the model's own first, then the fastest with room.
      std::vector<const DeviceState*> candidates;
      for (const DeviceState& d : s.devices) {
        if (std::find(current.begin(), current.end(), d.id) != current.end()) continue;
        if (d.software || backendOf(d.id) != backendOf(current[0])) continue;
        if (double(d.memoryFree()) < double(share) + config_.headroom * double(d.memoryTotal)) continue;
        candidates.push_back(&d);
      }
      std::sort(candidates.begin(), candidates.end(), [](const DeviceState* x, const DeviceState* y) {
        return x->speed != y->speed ? x->speed > y->speed : x->id < y->id;
      });
      if (int(current.size() + candidates.size()) < want) continue;
      a.devices = current;
      for (size_t i = 0; int(a.devices.size()) < want; i++) a.devices.push_back(candidates[i]->id);
      a.reason = "interactive replies missed their targets (" + std::to_string(recentFinished - recentMet) + " of " +
                 std::to_string(recentFinished) + " since the last tick): splits its blocks over " +
                 std::to_string(want) + " devices";
    } else if (degree > 1 && !busy && s.nowMs - mem.lastInteractiveMs >= config_.coolForMs) {
      a.devices = {current[0]};
      a.reason = "no interactive reply for " + std::to_string(config_.coolForMs / 1000) + " s: joins its blocks onto " +
                 current[0];
    } else {
      continue;
    }
    mem.lastSwitchMs = s.nowMs;
    actions.push_back(std::move(a));
  }
  return actions;
}

}  // namespace jitllm::policies
