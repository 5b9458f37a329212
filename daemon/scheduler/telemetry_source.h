// Where the scheduler's device telemetry comes from: temperature and memory per device, and
// whether the device is there at all. Sources: NVML for NVIDIA GPUs (the scheduler issue), the
// devices' own memory accounting, and a script (scripted_telemetry.h) for tests and demos.
//
// Thread-safety: read() from the scheduler's thread.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace jitllm::scheduler {

struct DeviceTelemetry {
  double temperatureC = NAN;         // NaN: unknown
  std::optional<size_t> memoryUsed;  // overrides the device's own accounting when set
  std::optional<size_t> memoryTotal;
  std::optional<bool> present;  // set: the source knows whether the device is there (hot-plug)
  double utilization = NAN;     // 0..1
  double powerWatts = NAN;
  double smClockMhz = NAN;
  std::string throttle;  // why clocks are held down ("thermal", "power"), "" when not or unknown
};

class TelemetrySource {
 public:
  virtual ~TelemetrySource() = default;
  // What is known of `deviceId` at `nowMs` (the scheduler's clock).
  virtual DeviceTelemetry read(const std::string& deviceId, int64_t nowMs) = 0;
  // A device the daemon found after the source was made (re-enumeration): a source that matches
  // devices by UUID looks this one up too. Default: nothing to do.
  virtual void deviceAdded(const std::string& deviceId, const std::string& uuid) {
    (void)deviceId;
    (void)uuid;
  }
};

// No telemetry beyond what the devices report themselves.
class NoTelemetry final : public TelemetrySource {
 public:
  DeviceTelemetry read(const std::string&, int64_t) override { return {}; }
};

}  // namespace jitllm::scheduler
