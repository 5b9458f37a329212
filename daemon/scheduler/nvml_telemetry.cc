#include "daemon/scheduler/nvml_telemetry.h"

#include <dlfcn.h>

namespace jitllm::scheduler {
namespace {

// The few NVML declarations we use (nvml.h is not a build dependency: the ABI below is stable).
using nvmlReturn = int;  // 0: NVML_SUCCESS
using nvmlDevice = void*;
struct nvmlMemory {
  unsigned long long total, free, used;
};
struct nvmlUtilization {
  unsigned int gpu, memory;
};
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1;         // NVML_CLOCK_SM
// nvmlClocksThrottleReasons bits that mean "held down", with the word `jitllmctl devices` shows.
constexpr struct {
  unsigned long long bit;
  const char* name;
} kThrottleReasons[] = {
    {0x4, "power cap"},           {0x8, "hardware slowdown"}, {0x20, "thermal (software)"},
    {0x40, "thermal (hardware)"}, {0x80, "power brake"},
};

}  // namespace

struct NvmlTelemetry::Api {
  nvmlReturn (*init)();
  nvmlReturn (*shutdown)();
  nvmlReturn (*count)(unsigned int*);
  nvmlReturn (*handleByIndex)(unsigned int, nvmlDevice*);
  nvmlReturn (*uuid)(nvmlDevice, char*, unsigned int);
  nvmlReturn (*temperature)(nvmlDevice, int, unsigned int*);
  nvmlReturn (*memory)(nvmlDevice, nvmlMemory*);
  nvmlReturn (*utilization)(nvmlDevice, nvmlUtilization*);
  nvmlReturn (*power)(nvmlDevice, unsigned int*);  // milliwatts
  nvmlReturn (*clock)(nvmlDevice, int, unsigned int*);
  nvmlReturn (*throttle)(nvmlDevice, unsigned long long*);
};

std::unique_ptr<NvmlTelemetry> NvmlTelemetry::open(const std::map<std::string, std::string>& uuidById,
                                                   std::string* why) {
  std::unique_ptr<NvmlTelemetry> t(new NvmlTelemetry());
  t->library_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!t->library_) {
    *why = "libnvidia-ml.so.1 is not installed (no NVIDIA driver)";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  bool complete = true;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(t->library_, name));
    if (!fn) complete = false;
  };
  bind(api->init, "nvmlInit_v2");
  bind(api->shutdown, "nvmlShutdown");
  bind(api->count, "nvmlDeviceGetCount_v2");
  bind(api->handleByIndex, "nvmlDeviceGetHandleByIndex_v2");
  bind(api->uuid, "nvmlDeviceGetUUID");
  bind(api->temperature, "nvmlDeviceGetTemperature");
  bind(api->memory, "nvmlDeviceGetMemoryInfo");
  bind(api->utilization, "nvmlDeviceGetUtilizationRates");
  bind(api->power, "nvmlDeviceGetPowerUsage");
  bind(api->clock, "nvmlDeviceGetClockInfo");
  bind(api->throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (!complete) {
    *why = "libnvidia-ml.so.1 lacks functions jitllmd reads (driver too old)";
    return nullptr;
  }
  if (api->init() != 0) {
    *why = "nvmlInit failed";
    return nullptr;
  }
  t->api_ = std::move(api);  // from here the destructor shuts NVML down
  t->uuidById_ = uuidById;
  const unsigned int count = t->match();
  if (t->handles_.empty()) {
    *why = "NVML knows " + std::to_string(count) + " GPU(s), none of them one of jitllmd's devices";
    return nullptr;
  }
  return t;
}

unsigned int NvmlTelemetry::match() {
  handles_.clear();
  unsigned int count = 0;
  if (api_->count(&count) != 0) count = 0;
  for (unsigned int i = 0; i < count; i++) {
    nvmlDevice handle = nullptr;
    char uuid[96] = {};
    if (api_->handleByIndex(i, &handle) != 0 || api_->uuid(handle, uuid, sizeof uuid) != 0) continue;
    std::string u = uuid;
    if (u.rfind("GPU-", 0) == 0) u = u.substr(4);  // "GPU-8-4-4-4-12"
    for (const auto& [id, deviceUuid] : uuidById_) {
      if (!deviceUuid.empty() && deviceUuid == u) handles_[id] = handle;
    }
  }
  return count;
}

void NvmlTelemetry::deviceAdded(const std::string& deviceId, const std::string& uuid) {
  if (uuid.empty()) return;
  uuidById_[deviceId] = uuid;
  match();
  if (handles_.count(deviceId)) return;
  // Not among the GPUs NVML counted at initialisation: count again (the handles change with it).
  api_->shutdown();
  if (api_->init() != 0) {
    handles_.clear();
    return;
  }
  match();
}

NvmlTelemetry::~NvmlTelemetry() {
  if (api_) api_->shutdown();
  if (library_) ::dlclose(library_);
}

DeviceTelemetry NvmlTelemetry::read(const std::string& deviceId, int64_t) {
  DeviceTelemetry t;
  auto it = handles_.find(deviceId);
  if (it == handles_.end()) return t;
  nvmlDevice d = it->second;
  unsigned int value = 0;
  if (api_->temperature(d, kTemperatureGpu, &value) == 0) t.temperatureC = value;
  nvmlMemory memory{};
  if (api_->memory(d, &memory) == 0) {
    t.memoryUsed = size_t(memory.used);
    t.memoryTotal = size_t(memory.total);
  }
  nvmlUtilization utilization{};
  if (api_->utilization(d, &utilization) == 0) t.utilization = utilization.gpu / 100.0;
  if (api_->power(d, &value) == 0) t.powerWatts = value / 1000.0;
  if (api_->clock(d, kClockSm, &value) == 0) t.smClockMhz = value;
  unsigned long long reasons = 0;
  if (api_->throttle(d, &reasons) == 0) {
    for (const auto& r : kThrottleReasons) {
      if (reasons & r.bit) t.throttle += (t.throttle.empty() ? "" : ", ") + std::string(r.name);
    }
  }
  // A GPU that fell off the bus answers nothing: NVML's "GPU is lost" is the health check's business
  // (Device::responsive); here the values simply stay unknown.
  return t;
}

}  // namespace jitllm::scheduler
