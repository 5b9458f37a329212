// Devices that went away under a resident model (unplugged, a driver reset), as its worker learns
// of them, and what re-placing the model's units after one takes.
//
// DeviceTable / DaemonCore find a device gone and ask each model that used it (ModelHost::
// deviceLost); the model's worker handles the request before its next step, once that step's
// locks cover the lost device and its fallback: it ends the sessions whose KV was there (the
// host's part), binds the units that ran there again on the fallback from the file's weights
// (replaceUnits below), and the requester hears back once ps shows the new placement.
//
// Ownership: LostDevices holds the requests and their callbacks; the devices are borrowed.
// Thread-safety: LostDevices::add() and pending() from any thread; the rest of LostDevices, and
// the free functions, on the model's worker only.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/model.h"
#include "kernels/device.h"

namespace jitllm::server {

class LostDevices final {
 public:
  struct Request {
    Device* lost;
    Device* fallback;
    std::string why;
    std::function<void()> done;  // may be empty
  };

  // Queues a request; false once close() ran (the model is being unloaded and has nothing to
  // re-place: the caller runs `done` itself).
  bool add(Request request);
  // Requests wait for the worker.
  bool pending() const;
  // The devices the waiting requests name: this iteration locks them.
  void addDevicesTo(std::vector<Device*>& devices) const;
  // The waiting requests whose devices `locks` cover; those that came after this iteration took
  // its locks stay for the next one.
  std::vector<Request> takeCovered(const DeviceLocks& locks);
  // `done` runs at runAfterPublish(), once ps shows the new placement.
  void afterPublish(std::function<void()> done);
  void runAfterPublish();
  // The model is being unloaded: every callback runs now, and add() refuses from now on.
  void close();

 private:
  mutable std::mutex mutex_;
  std::vector<Request> waiting_;
  bool closed_ = false;
  std::vector<std::function<void()>> afterPublish_;  // worker only
};

// The units of a model that run on a device, wholly or as one of a split block's devices.
struct UnitsOnDevice {
  std::vector<int> units;
  bool holdsKv = false;  // one of them is a block: every session has KV there
  std::string names;     // "blk.3-7, output": the runs of units
};
UnitsOnDevice unitsOn(const runtime::Model& model, const Device& device);

// Binds `on.units` again on `fallback` from the file's weights and lets the model release `lost`.
// Returns the outcome for the model.replaced event; a failure is said there (and logged), not
// thrown: the model stays as it is, less the device.
std::string replaceUnits(runtime::Model& model, const std::string& modelName, const UnitsOnDevice& on, Device& lost,
                         Device& fallback, const std::string& cause);

}  // namespace jitllm::server
