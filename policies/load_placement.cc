#include "policies/load_placement.h"

#include <algorithm>
#include <set>

namespace jitllm::policies {
namespace {

size_t freesOn(const LoadedModel& m, size_t device) { return device < m.frees.size() ? m.frees[device] : 0; }

// The models that may make room on `device` (those with something there), least recently used first.
std::vector<std::string> idleOn(const LoadSnapshot& s, size_t device) {
  std::vector<const LoadedModel*> idle;
  for (const LoadedModel& m : s.models) {
    if (mayMakeRoom(m) && freesOn(m, device) > 0) idle.push_back(&m);
  }
  std::sort(idle.begin(), idle.end(), [](const LoadedModel* a, const LoadedModel* b) {
    return a->lastUsedMs != b->lastUsedMs ? a->lastUsedMs < b->lastUsedMs : a->name < b->name;
  });
  std::vector<std::string> names;
  for (const LoadedModel* m : idle) names.push_back(m->name);
  return names;
}

// Room on each device where `want` is more than is free and some model may make it.
std::vector<RoomToMake> roomFor(const LoadSnapshot& s, const std::vector<size_t>& want) {
  std::vector<RoomToMake> rooms;
  for (size_t d = 0; d < s.devices.size(); d++) {
    if (want[d] <= s.devices[d].memoryFree) continue;
    std::vector<std::string> models = idleOn(s, d);
    if (!models.empty()) rooms.push_back({d, want[d], std::move(models)});
  }
  return rooms;
}

// "units 0-9 on cuda:0 (980 MiB), 10-17 on cpu:0 (80 MiB)": each run of units in order, with what
// the placement takes on its device.
std::string describe(const std::vector<PlacementDevice>& devices, const Placement& p) {
  std::string where;
  for (size_t first = 0, last = 0; first < p.unitDevice.size(); first = last + 1) {
    const size_t d = size_t(p.unitDevice[first]);
    for (last = first; last + 1 < p.unitDevice.size() && size_t(p.unitDevice[last + 1]) == d;) last++;
    where += (where.empty() ? "" : ", ") + std::to_string(first) + "-" + std::to_string(last) + " on " +
             devices[d].id.str() + " (" + mebibytes(p.bytesUsed[d]) + ")";
  }
  return "units " + where;
}

// Several devices named: their units where the caller put them, each device with room for its share.
LoadPlan planFixed(const LoadSnapshot& s) {
  LoadPlan plan;
  std::vector<size_t> need(s.devices.size(), 0);
  for (size_t u = 0; u < s.fixed.size(); u++) {
    const size_t d = size_t(s.fixed[u]);
    need[d] += unitNeed(s.devices[d], s.request, u);
  }
  plan.makeRoom = roomFor(s, need);
  for (size_t d = 0; d < s.devices.size(); d++) {
    const bool roomComing =
        std::any_of(plan.makeRoom.begin(), plan.makeRoom.end(), [&](const RoomToMake& r) { return r.device == d; });
    if (need[d] <= s.devices[d].memoryFree || roomComing) continue;
    plan.makeRoom.clear();  // refused: nothing is paged out for a load that cannot happen
    plan.placement.why = "needs " + mebibytes(need[d]) + " on " + s.devices[d].id.str() + ", which has " +
                         mebibytes(s.devices[d].memoryFree) +
                         " free even with the idle models paged out; name fewer devices or other ones, or unload a "
                         "model";
    return plan;
  }
  if (plan.makeRoom.empty()) plan.placement = {true, s.fixed, need, {}, ""};
  return plan;
}

// The units placed by speed (`now`: as the devices are), or streamed when spilling and allowed to.
LoadPlan settle(const LoadSnapshot& s, Placement now) {
  LoadPlan plan;
  const size_t blocks = s.request.weightBytes.size() - std::min<size_t>(s.request.weightBytes.size(), 2);
  const bool spills = now.ok && std::set<int>(now.unitDevice.begin(), now.unitDevice.end()).size() > 1;
  if (s.stream && (spills || !now.ok)) {
    Placement streaming = placeStreaming(s.devices, s.request);
    const auto n = std::count(streaming.streamed.begin(), streaming.streamed.end(), true);
    if (streaming.ok && n > 0) {
      plan.placed = {describe(s.devices, streaming),
                     std::to_string(n) + " of " + std::to_string(blocks) + " blocks stream through " +
                         s.devices[size_t(streaming.unitDevice[1])].id.str() + " each step (spill = stream)"};
      plan.placement = std::move(streaming);
      return plan;
    }
  }
  if (now.ok) {
    plan.placed = {describe(s.devices, now)};
  } else {
    now.why = "does not fit: " + now.why +
              " (idle models were paged out first); unload a model or load with a smaller context";
  }
  plan.placement = std::move(now);
  return plan;
}

}  // namespace

bool mayMakeRoom(const LoadedModel& m) { return !m.busy && !m.pinned; }

LoadPlan planLoad(const LoadSnapshot& s) {
  if (!s.fixed.empty()) return planFixed(s);
  // What the model would get if every idle model made room: when that is better than what it gets
  // now (more of it on faster devices) or the only way it fits, they make room where it is needed.
  std::vector<PlacementDevice> reclaimable = s.devices;
  for (const LoadedModel& m : s.models) {
    if (!mayMakeRoom(m)) continue;
    for (size_t d = 0; d < reclaimable.size(); d++) reclaimable[d].memoryFree += freesOn(m, d);
  }
  const Placement ideal = placeUnits(reclaimable, s.request);
  Placement now = placeUnits(s.devices, s.request);
  if (ideal.ok && (!now.ok || now.unitDevice != ideal.unitDevice)) {
    LoadPlan plan;
    plan.makeRoom = roomFor(s, ideal.bytesUsed);
    if (!plan.makeRoom.empty()) return plan;
  }
  return settle(s, std::move(now));
}

}  // namespace jitllm::policies
