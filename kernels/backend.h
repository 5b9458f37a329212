// Backend: one kind of device (cpu, cuda, vulkan) as the engine opens and finds it. Each backend
// library implements this once; a BackendRegistry (engine/devices/backend_registry.h) holds the
// backends a program has and is the only place that knows which exist. Adding a backend is a
// Backend implementation and its registration - nothing else names backends.
//
// Thread-safety: a Backend is used by one thread at a time; the devices it opens are independent
// objects owned by the caller. An Enumeration is a value; its `open` is used by one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/device_id.h"
#include "kernels/device.h"

namespace jitllm {

// What opening a device takes beyond its id.
struct DeviceOpenOptions {
  DeviceId id;           // the id it will carry
  size_t memoryCap = 0;  // 0: what the device has (less the backend's reserve)
  int hostThreads = 0;   // host threads a device computing on the CPU uses; 0: one per online core
};

// A device a backend found plugged in, before it is opened.
struct FoundDevice {
  std::string backend;
  int index = 0;     // its position among this enumeration's usable devices of its backend
  std::string uuid;  // formatUuid; "" where the backend has none (the CPU)
  std::string name;
  bool software = false;
};

// What was plugged in at one moment, and how to open it.
struct Enumeration {
  std::vector<FoundDevice> devices;  // in preference order
  // Backends every present device of which is in `devices`: only for those does a device that is
  // missing count as gone.
  std::vector<std::string> complete;
  // Opens one of `devices` under options.id (a device found later may be numbered differently
  // from its enumeration index). Keeps alive what it needs (a Vulkan instance). Errors as
  // Backend::open.
  std::function<std::unique_ptr<Device>(const FoundDevice&, const DeviceOpenOptions&)> open;

  bool isComplete(std::string_view backend) const {
    for (const std::string& b : complete) {
      if (b == backend) return true;
    }
    return false;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The name its ids carry: "cpu" in "cpu:0".
  virtual const std::string& name() const = 0;
  // Opens device options.id.index of this backend. Error(UNIMPLEMENTED) naming the reason when
  // this machine has no such device; Error(FAILED) for bad options.
  virtual std::unique_ptr<Device> open(const DeviceOpenOptions& options) = 0;
  // The devices there now (for `devices = auto`). A backend that cannot look (no driver) returns
  // none, complete for nothing, and says why in `why` when given.
  virtual Enumeration enumerate(std::string* why) = 0;
  // Whether enumerate() can find a device plugged in after the process started (Vulkan asks the
  // drivers again; CUDA numbers its devices once per process; the CPU does not change). Only such
  // backends are asked when the daemon looks for arrivals.
  virtual bool findsArrivals() const { return false; }
};

}  // namespace jitllm
