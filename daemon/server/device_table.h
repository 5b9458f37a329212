// The daemon's devices and their state: online or gone, and the latest telemetry.
//
// A device that vanishes (unplugged, driver reset, or a telemetry script saying so) stays in the
// table, offline: models may still hold pointers to it until they have been re-placed, and it
// may come back (hot-plug). Devices found later by re-enumeration are added; none is ever
// removed, so a Device* from the table stays valid as long as the table.
//
// Ownership: owns the devices.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/device.h"

namespace jitllm::server {

// What the scheduler last read of a device (NaN where unknown).
struct DeviceReadings {
  double temperatureC = NAN;
  double utilization = NAN;  // 0..1
  double powerWatts = NAN;
  std::string throttle;  // why the clocks are held down ("thermal", "power"), "" when they are not
};

struct DeviceStatus {
  Device* device = nullptr;
  bool online = true;
  double measuredSpeed = 0;   // GB/s from the placement probe; 0: not measured
  std::string offlineReason;  // why it went offline
  DeviceReadings readings;
};

class DeviceTable final {
 public:
  explicit DeviceTable(std::vector<std::unique_ptr<Device>> devices);

  // Online devices, in the order they were configured (then added).
  std::vector<Device*> online() const;
  std::vector<DeviceStatus> all() const;
  // Any state; null when the table has no such id.
  Device* find(const DeviceId& id) const;
  bool isOnline(const DeviceId& id) const;
  // False when it already was in that state (or there is no such device).
  bool setOnline(const DeviceId& id, bool online, const std::string& reason);
  void add(std::unique_ptr<Device> device);
  // A device that came back is opened again: `device` takes the place of the one called `id`
  // (which must be offline), online; the old object stays alive with the table, since models may
  // still point at it.
  void replace(const DeviceId& id, std::unique_ptr<Device> device);
  // Any state; null when no device has that UUID (or it is empty).
  Device* findByUuid(const std::string& uuid) const;
  // The lowest N no device of the table is called "<backend>:N".
  int freeIndex(const std::string& backend) const;
  void setReadings(const DeviceId& id, const DeviceReadings& readings);

  // Relative throughput for placement: the probe's GB/s (runtime/speed_probe.h) once measured,
  // until then nominal: GPUs 1000, the CPU 10, software devices 1.
  double speed(const Device& device) const;
  void setMeasuredSpeed(const DeviceId& id, double gbPerSecond);
  static double nominalSpeed(const DeviceInfo& device);

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<DeviceStatus> status_;  // parallel to devices_
  std::vector<std::unique_ptr<Device>> replaced_;
};

}  // namespace jitllm::server
