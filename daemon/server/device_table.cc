#include "daemon/server/device_table.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::server {

DeviceTable::DeviceTable(std::vector<std::unique_ptr<Device>> devices) {
  for (auto& d : devices) add(std::move(d));
}

std::vector<Device*> DeviceTable::online() const {
  std::lock_guard lock(mutex_);
  std::vector<Device*> out;
  for (const auto& s : status_) {
    if (s.online) out.push_back(s.device);
  }
  return out;
}

std::vector<DeviceStatus> DeviceTable::all() const {
  std::lock_guard lock(mutex_);
  return status_;
}

Device* DeviceTable::find(const DeviceId& id) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (s.device->info().id == id) return s.device;
  }
  return nullptr;
}

bool DeviceTable::isOnline(const DeviceId& id) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (s.device->info().id == id) return s.online;
  }
  return false;
}

bool DeviceTable::setOnline(const DeviceId& id, bool online, const std::string& reason) {
  std::lock_guard lock(mutex_);
  for (auto& s : status_) {
    if (s.device->info().id != id || s.online == online) continue;
    s.online = online;
    s.offlineReason = online ? "" : reason;
    if (!online) s.readings = {};
    return true;
  }
  return false;
}

void DeviceTable::add(std::unique_ptr<Device> device) {
  std::lock_guard lock(mutex_);
  DeviceStatus s;
  s.device = device.get();
  devices_.push_back(std::move(device));
  status_.push_back(s);
}

void DeviceTable::replace(const DeviceId& id, std::unique_ptr<Device> device) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < status_.size(); i++) {
    if (status_[i].device->info().id != id) continue;
    JITLLM_REQUIRE(!status_[i].online, "device ", id, " is online: it cannot be replaced");
    replaced_.push_back(std::move(devices_[i]));
    devices_[i] = std::move(device);
    status_[i].device = devices_[i].get();
    status_[i].online = true;
    status_[i].offlineReason.clear();
    return;
  }
  JITLLM_FAIL(kFailed, "no device ", id, " to replace");
}

Device* DeviceTable::findByUuid(const std::string& uuid) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (!uuid.empty() && s.device->info().uuid == uuid) return s.device;
  }
  return nullptr;
}

int DeviceTable::freeIndex(const std::string& backend) const {
  std::lock_guard lock(mutex_);
  for (int n = 0;; n++) {
    const DeviceId id{backend, n};
    if (std::none_of(status_.begin(), status_.end(), [&](const auto& s) { return s.device->info().id == id; })) {
      return n;
    }
  }
}

double DeviceTable::nominalSpeed(const DeviceInfo& d) {
  if (d.software) return 1;
  return d.caps.hostMemory ? 10 : 1000;
}

double DeviceTable::speed(const Device& device) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (s.device == &device && s.measuredSpeed > 0) return s.measuredSpeed;
  }
  return nominalSpeed(device.info());
}

void DeviceTable::setMeasuredSpeed(const DeviceId& id, double gbPerSecond) {
  std::lock_guard lock(mutex_);
  for (auto& s : status_) {
    if (s.device->info().id == id) s.measuredSpeed = gbPerSecond;
  }
}

void DeviceTable::setReadings(const DeviceId& id, const DeviceReadings& readings) {
  std::lock_guard lock(mutex_);
  for (auto& s : status_) {
    if (s.device->info().id == id) s.readings = readings;
  }
}

}  // namespace jitllm::server
