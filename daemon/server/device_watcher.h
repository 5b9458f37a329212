// When the daemon looks for devices that arrived or vanished (DaemonCore::rescanDevices): every
// `interval`, and soon after the kernel announces a change in the subsystems GPUs live in (an
// sd-device monitor from libsystemd on "drm" and "nvidia"). Announcements come in bursts while a
// driver binds (card, render node, connectors), so the look waits until they have been quiet for
// `settle`.
//
// Where the monitor cannot be opened (no udev in a container, no netlink) the periodic look
// remains; problem() says why.
//
// Ownership: owns its thread and the monitor; `rescan` must stay callable until destruction.
// Thread-safety: trigger() from any thread; `rescan` runs on the watcher's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace jitllm::server {

struct DeviceWatcherOptions {
  std::chrono::milliseconds interval{10000};  // 0: only when the monitor or trigger() says so
  std::chrono::milliseconds settle{1000};
  std::vector<std::string> subsystems{"drm", "nvidia"};  // empty: no monitor
};

class DeviceWatcher final {
 public:
  DeviceWatcher(std::function<void()> rescan, DeviceWatcherOptions options);
  ~DeviceWatcher();
  DeviceWatcher(const DeviceWatcher&) = delete;
  DeviceWatcher& operator=(const DeviceWatcher&) = delete;

  // Look soon (after `settle`), as if the monitor had seen a change.
  void trigger();
  // Whether the sd-device monitor runs; when not, why.
  bool monitoring() const { return monitor_ != nullptr; }
  const std::string& problem() const { return problem_; }
  // How many looks have run so far.
  uint64_t looks() const;

 private:
  struct Monitor;
  void run();
  static int onDevice(void* monitor, void* device, void* self);

  std::function<void()> rescan_;
  const DeviceWatcherOptions options_;
  Monitor* monitor_ = nullptr;  // owned; null without one
  std::string problem_;
  int wakeFd_ = -1;  // eventfd: trigger() and the destructor
  std::atomic<bool> stopping_{false};
  std::atomic<bool> changed_{false};
  std::atomic<uint64_t> looks_{0};
  std::thread thread_;
};

}  // namespace jitllm::server
