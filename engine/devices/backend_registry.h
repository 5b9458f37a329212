// The backends a program has, and the devices it opens through them: the one place that turns
// device names ("cpu:0,cuda:1@2G", "auto") into Devices. builtin_backends.h makes the registry of
// every backend this build has; a test may add its own (tests/backends: a toy "null" backend).
//
// Ownership: owns its backends; the devices it opens belong to the caller.
// Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"

namespace jitllm::runtime {

// Every device of the machine (`devices = auto`), and the ones that could not be opened.
struct AllDevices {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::string> skipped;  // "cuda:1: why"
};

class BackendRegistry final {
 public:
  BackendRegistry() = default;
  BackendRegistry(BackendRegistry&&) = default;
  BackendRegistry& operator=(BackendRegistry&&) = default;

  // Error(FAILED) when a backend of that name is there already.
  void add(std::unique_ptr<Backend> backend);
  // Null when there is none of that name.
  Backend* find(std::string_view name) const;
  // The backends' names, in registration order.
  std::vector<std::string> names() const;

  // The devices a list names ("cpu:0,cpu:1", "cuda:0@2G"), opened in order; "auto" is openAll()'s
  // devices. Error(FAILED) for a bad list or a backend this build lacks (naming those it has), else
  // the backend's errors.
  std::vector<std::unique_ptr<Device>> open(std::string_view spec, int hostThreads);
  std::unique_ptr<Device> open(const DeviceRequest& request, int hostThreads);

  // Every device of the machine: each backend's, in registration order, numbered as the backend
  // numbers them; a GPU seen through two backends (CUDA and Vulkan) once, through the first. A
  // device that fails to open is left out with the reason in `skipped` rather than keeping the
  // daemon from starting.
  AllDevices openAll(int hostThreads);

  // What the backends that find arrivals (Backend::findsArrivals) see plugged in now, in one
  // enumeration: how the daemon notices a GPU that came or went while it ran.
  Enumeration enumerateArrivals();

 private:
  Backend& require(const DeviceId& id) const;

  std::vector<std::unique_ptr<Backend>> backends_;
};

}  // namespace jitllm::runtime
