// Telemetry of NVIDIA GPUs from NVML: temperature, memory used and total (all processes), GPU
// utilisation, power, SM clock and why the clocks are held down. libnvidia-ml is loaded with
// dlopen, so jitllmd runs where it is absent (every machine without the NVIDIA driver).
//
// GPUs are matched to the daemon's devices by UUID (DeviceInfo::uuid), so cuda:N and a vulkan:M
// that is the same GPU read the same values, whatever order CUDA and Vulkan number them in.
//
// Ownership: holds the library and NVML's initialisation for its lifetime.
// Thread-safety: read() from one thread (the scheduler's).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "daemon/scheduler/telemetry_source.h"

namespace jitllm::scheduler {

class NvmlTelemetry final : public TelemetrySource {
 public:
  // `uuidById`: device id -> DeviceInfo::uuid, for the devices NVML may know. Null (and `why`
  // says) when the library is missing, does not initialise, or knows none of the devices.
  static std::unique_ptr<NvmlTelemetry> open(const std::map<std::string, std::string>& uuidById, std::string* why);
  ~NvmlTelemetry() override;
  NvmlTelemetry(const NvmlTelemetry&) = delete;
  NvmlTelemetry& operator=(const NvmlTelemetry&) = delete;

  DeviceTelemetry read(const std::string& deviceId, int64_t nowMs) override;
  // NVML counts its GPUs at initialisation: for a GPU plugged in since, it starts again.
  void deviceAdded(const std::string& deviceId, const std::string& uuid) override;
  // How many of the devices it reads ("2 of 3").
  size_t matched() const { return handles_.size(); }

 private:
  struct Api;
  NvmlTelemetry() = default;

  void* library_ = nullptr;
  std::unique_ptr<Api> api_;
  // Looks every GPU NVML knows up in uuidById_; the number it knows.
  unsigned int match();

  std::map<std::string, std::string> uuidById_;
  std::map<std::string, void*> handles_;  // device id -> nvmlDevice_t
};

}  // namespace jitllm::scheduler
