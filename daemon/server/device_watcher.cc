#include "daemon/server/device_watcher.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <systemd/sd-device.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace jitllm::server {

using Clock = std::chrono::steady_clock;

struct DeviceWatcher::Monitor {
  sd_event* event = nullptr;
  sd_device_monitor* monitor = nullptr;
  ~Monitor() {
    if (monitor) sd_device_monitor_unref(monitor);
    if (event) sd_event_unref(event);
  }
};

namespace {

std::string errnoText(int negativeErrno) { return std::strerror(-negativeErrno); }

}  // namespace

int DeviceWatcher::onDevice(void*, void* device, void* self) {
  auto* watcher = static_cast<DeviceWatcher*>(self);
  const char* sysname = nullptr;
  const char* subsystem = nullptr;
  sd_device_action_t action = _SD_DEVICE_ACTION_INVALID;
  sd_device_get_sysname(static_cast<sd_device*>(device), &sysname);
  sd_device_get_subsystem(static_cast<sd_device*>(device), &subsystem);
  sd_device_get_action(static_cast<sd_device*>(device), &action);
  spdlog::debug("device monitor: {} {} (action {})", subsystem ? subsystem : "?", sysname ? sysname : "?", int(action));
  watcher->changed_ = true;
  return 0;
}

DeviceWatcher::DeviceWatcher(std::function<void()> rescan, DeviceWatcherOptions options)
    : rescan_(std::move(rescan)), options_(std::move(options)) {
  wakeFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!options_.subsystems.empty()) {
    auto m = std::make_unique<Monitor>();
    int r = sd_event_new(&m->event);
    if (r >= 0) r = sd_device_monitor_new(&m->monitor);
    for (const std::string& s : options_.subsystems) {
      if (r >= 0) r = sd_device_monitor_filter_add_match_subsystem_devtype(m->monitor, s.c_str(), nullptr);
    }
    if (r >= 0) r = sd_device_monitor_attach_event(m->monitor, m->event);
    if (r >= 0) {
      r = sd_device_monitor_start(
          m->monitor, [](sd_device_monitor* mon, sd_device* dev, void* self) { return onDevice(mon, dev, self); },
          this);
    }
    if (r >= 0) {
      monitor_ = m.release();
    } else {
      problem_ = "the sd-device monitor could not start: " + errnoText(r);
    }
  } else {
    problem_ = "no subsystems to monitor";
  }
  thread_ = std::thread([this] { run(); });
}

DeviceWatcher::~DeviceWatcher() {
  stopping_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wakeFd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  delete monitor_;
  ::close(wakeFd_);
}

void DeviceWatcher::trigger() {
  changed_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wakeFd_, &one, sizeof one);
}

uint64_t DeviceWatcher::looks() const { return looks_.load(); }

void DeviceWatcher::run() {
  auto nextPeriodic = Clock::now() + options_.interval;
  constexpr auto kNever = Clock::time_point::max();
  auto settleUntil = kNever;  // a change was seen: look once it has been quiet until then
  while (!stopping_) {
    const auto now = Clock::now();
    auto deadline = std::min(options_.interval.count() > 0 ? nextPeriodic : kNever, settleUntil);
    const int timeoutMs =
        deadline == kNever ? -1
                           : int(std::max<int64_t>(
                                 0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    pollfd fds[2] = {{wakeFd_, POLLIN, 0}, {monitor_ ? sd_event_get_fd(monitor_->event) : -1, POLLIN, 0}};
    ::poll(fds, monitor_ ? 2 : 1, timeoutMs);
    if (stopping_) break;
    if (fds[0].revents & POLLIN) {
      uint64_t n;
      [[maybe_unused]] ssize_t r = ::read(wakeFd_, &n, sizeof n);
    }
    if (monitor_ && (fds[1].revents & POLLIN)) {
      while (sd_event_run(monitor_->event, 0) > 0) {
      }
    }
    if (changed_.exchange(false)) settleUntil = Clock::now() + options_.settle;  // (re)starts the quiet period
    const auto t = Clock::now();
    const bool periodic = options_.interval.count() > 0 && t >= nextPeriodic;
    const bool settled = t >= settleUntil;
    if (!periodic && !settled) continue;
    settleUntil = kNever;
    nextPeriodic = t + options_.interval;
    try {
      rescan_();
    } catch (const std::exception& e) {
      spdlog::error("device re-enumeration failed: {}", e.what());
    }
    looks_++;
  }
}

}  // namespace jitllm::server
