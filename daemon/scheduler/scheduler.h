// The scheduler: once per tick it turns the daemon's state and the devices' telemetry into a
// policies::Snapshot, asks the active policy for a plan, and carries the plan out - migrations
// through ModelHost::migrate (so pins, the one-migration-per-model rule and every failure path
// are the same as for `jitllmctl migrate`), a page-out as a move of the model's units to the CPU
// (whose weights are the mapped file: the device memory is freed, the model stays usable).
// Every action is an event with the policy's reason.
//
// The clock is the caller's (tick(nowMs)): jitllmd ticks it from a timer, tests from a virtual
// clock.
//
// Ownership: borrows the DaemonCore, which must outlive it.
// Thread-safety: tick() and setPolicy() from one thread (the daemon's timer loop); policyName()
// from any.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "daemon/scheduler/telemetry_source.h"
#include "daemon/server/daemon_core.h"
#include "policies/policy.h"

namespace jitllm::scheduler {

class Scheduler final : public server::PolicyControl {
 public:
  Scheduler(server::DaemonCore& core, std::unique_ptr<TelemetrySource> telemetry, policies::PolicyConfig config,
            const std::string& policy);

  // Error(FAILED) naming the known policies for an unknown name.
  void setPolicy(const std::string& name) override;
  std::string policyName() const override;

  // One tick: snapshot, plan, act - at most one action per model (a model runs one migration at
  // a time; the policy plans the rest again next tick). Returns the actions it started.
  std::vector<policies::Action> tick(int64_t nowMs);
  // The snapshot tick() would plan from (for tests and `jitllmctl`).
  policies::Snapshot snapshot(int64_t nowMs);

 private:
  void execute(const policies::Action& action);
  using Readings = std::map<std::string, DeviceTelemetry>;
  // One reading per device (online or not) per tick: the telemetry source is asked once.
  Readings readAll(int64_t nowMs);
  // Devices the telemetry says vanished or came back (hot-plug), and the readings `jitllmctl
  // devices` shows.
  void followDevices(const Readings& readings);
  policies::Snapshot snapshot(int64_t nowMs, const Readings& readings);

  server::DaemonCore& core_;
  std::unique_ptr<TelemetrySource> telemetry_;
  const policies::PolicyConfig config_;
  mutable std::mutex mutex_;  // guards policy_ (setPolicy may come from the RPC thread)
  std::unique_ptr<policies::Policy> policy_;
  std::mutex busyMutex_;  // guards lastBusy_ (snapshot() may come from another thread than tick())
  std::map<const Device*, std::pair<uint64_t, std::chrono::steady_clock::time_point>> lastBusy_;
  std::set<const Device*> known_;  // devices the telemetry source has been told of; guarded by busyMutex_
};

}  // namespace jitllm::scheduler
