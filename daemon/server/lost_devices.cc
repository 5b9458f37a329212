#include "daemon/server/lost_devices.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/error.h"
#include "engine/runtime/unit_range.h"

namespace jitllm::server {

bool LostDevices::add(Request request) {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  waiting_.push_back(std::move(request));
  return true;
}

bool LostDevices::pending() const {
  std::lock_guard lock(mutex_);
  return !waiting_.empty();
}

void LostDevices::addDevicesTo(std::vector<Device*>& devices) const {
  std::lock_guard lock(mutex_);
  for (const Request& r : waiting_) {
    devices.push_back(r.lost);
    devices.push_back(r.fallback);
  }
}

std::vector<LostDevices::Request> LostDevices::takeCovered(const DeviceLocks& locks) {
  std::vector<Request> covered, later;
  std::lock_guard lock(mutex_);
  for (Request& r : waiting_) {
    (locks.holds(r.lost) && locks.holds(r.fallback) ? covered : later).push_back(std::move(r));
  }
  waiting_.swap(later);
  return covered;
}

void LostDevices::afterPublish(std::function<void()> done) {
  if (done) afterPublish_.push_back(std::move(done));
}

void LostDevices::runAfterPublish() {
  for (auto& done : afterPublish_) done();
  afterPublish_.clear();
}

void LostDevices::close() {
  std::vector<Request> waiting;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    waiting.swap(waiting_);
  }
  for (Request& r : waiting) {
    if (r.done) r.done();
  }
  runAfterPublish();
}

UnitsOnDevice unitsOn(const runtime::Model& model, const Device& device) {
  UnitsOnDevice on;
  const int layers = int(model.config().layers);
  for (int u = 0; u < model.unitCount(); u++) {
    const runtime::UnitInfo info = model.unitInfo(u);
    if (info.device != &device && std::find(info.shards.begin(), info.shards.end(), &device) == info.shards.end()) {
      continue;
    }
    on.units.push_back(u);
    on.holdsKv = on.holdsKv || (u > 0 && u <= layers);
  }
  for (size_t i = 0; i < on.units.size();) {
    size_t j = i;
    while (j + 1 < on.units.size() && on.units[j + 1] == on.units[j] + 1) j++;
    on.names += (on.names.empty() ? "" : ", ") + runtime::unitRangeName({on.units[i], on.units[j]}, layers);
    i = j + 1;
  }
  return on;
}

std::string replaceUnits(runtime::Model& model, const std::string& modelName, const UnitsOnDevice& on, Device& lost,
                         Device& fallback, const std::string& cause) {
  try {
    for (int u : on.units) model.rebindUnit(u, fallback);
    model.releaseDevice(lost);
    return "re-placed " + on.names + " of " + modelName + " on " + fallback.info().id.str() + " from the file after " +
           cause;
  } catch (const Error& e) {
    std::string outcome = "could not re-place " + on.names + " of " + modelName + " after " + cause + ": " + e.what();
    spdlog::error("model '{}': {}", modelName, outcome);
    return outcome;
  }
}

}  // namespace jitllm::server
