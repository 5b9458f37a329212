#include "policies/moves.h"

#include <cmath>
#include <tuple>

namespace jitllm::policies {

std::vector<UnitRun> movableRuns(const ModelState& model, const DeviceId& device) {
  std::vector<UnitRun> runs;
  bool open = false;
  for (int u = 0; u < int(model.units.size()); u++) {
    const UnitState& unit = model.units[size_t(u)];
    if (unit.device != device || !unit.movable()) {
      open = false;
      continue;
    }
    if (!open) runs.push_back({u, u, 0});
    runs.back().last = u;
    runs.back().bytes += unit.bytes;
    open = true;
  }
  return runs;
}

const DeviceState* pickTarget(const Snapshot& snapshot, const DeviceId& from, size_t bytes, double headroom,
                              const std::function<bool(const DeviceState&)>& allowed, MoveBudget& budget) {
  const DeviceState* best = nullptr;
  auto rank = [](const DeviceState& d) {
    const double temperature = std::isnan(d.temperatureC) ? 0.0 : d.temperatureC;
    return std::make_tuple(!d.software, d.speed, -temperature, d.memoryFree());
  };
  for (const DeviceState& d : snapshot.devices) {
    if (d.id == from || (allowed && !allowed(d))) continue;
    const size_t reserve = size_t(headroom * double(d.memoryTotal));
    const size_t planned = budget.count(d.id) ? budget.at(d.id) : 0;
    if (d.memoryFree() < reserve + planned + d.promised + bytes) continue;
    if (!best || rank(d) > rank(*best)) best = &d;
  }
  if (best) budget[best->id] += bytes;
  return best;
}

std::string runName(const ModelState& model, const UnitRun& run) {
  const std::string& first = model.units[size_t(run.first)].name;
  if (run.first == run.last) return first;
  return first + "-" + model.units[size_t(run.last)].name;
}

}  // namespace jitllm::policies
