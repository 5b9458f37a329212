#include "daemon/server/device_table.h"

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

Device* DeviceTable::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (s.device->info().id == id) return s.device;
  }
  return nullptr;
}

bool DeviceTable::isOnline(const std::string& id) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (s.device->info().id == id) return s.online;
  }
  return false;
}

bool DeviceTable::setOnline(const std::string& id, bool online, const std::string& reason) {
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

double DeviceTable::nominalSpeed(const DeviceInfo& d) {
  if (d.software) return 1;
  return d.backend == Backend::kCpu ? 10 : 1000;
}

double DeviceTable::speed(const Device& device) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : status_) {
    if (s.device == &device && s.measuredSpeed > 0) return s.measuredSpeed;
  }
  return nominalSpeed(device.info());
}

void DeviceTable::setMeasuredSpeed(const std::string& id, double gbPerSecond) {
  std::lock_guard lock(mutex_);
  for (auto& s : status_) {
    if (s.device->info().id == id) s.measuredSpeed = gbPerSecond;
  }
}

void DeviceTable::setReadings(const std::string& id, const DeviceReadings& readings) {
  std::lock_guard lock(mutex_);
  for (auto& s : status_) {
    if (s.device->info().id == id) s.readings = readings;
  }
}

}  // namespace jitllm::server
