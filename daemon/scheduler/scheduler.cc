#include "daemon/scheduler/scheduler.h"

#include <set>

#include "daemon/runtime/unit_range.h"
#include "kernels/error.h"

namespace jitllm::scheduler {
namespace {

// Relative speed until the placement probe measures it: GPUs before the CPU, software last.
double nominalSpeed(const DeviceInfo& d) {
  if (d.software) return 0.1;
  return d.backend == Backend::kCpu ? 1.0 : 10.0;
}

std::string knownPolicies() {
  std::string names;
  for (const auto& n : policies::policyNames()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

}  // namespace

Scheduler::Scheduler(server::DaemonCore& core, std::unique_ptr<TelemetrySource> telemetry,
                     policies::PolicyConfig config, const std::string& policy)
    : core_(core), telemetry_(std::move(telemetry)), config_(config) {
  if (!telemetry_) telemetry_ = std::make_unique<NoTelemetry>();
  setPolicy(policy);
}

void Scheduler::setPolicy(const std::string& name) {
  auto p = policies::makePolicy(name, config_);
  JITLLM_REQUIRE(p != nullptr, "no policy '", name, "'; there are ", knownPolicies());
  std::string previous;
  {
    std::lock_guard lock(mutex_);
    if (policy_) previous = policy_->name();
    policy_ = std::move(p);
  }
  if (!previous.empty() && previous != name) {
    core_.events().emit(
        {0, server::EventKind::kDaemon, "scheduler.policy", "", "", 0, "policy " + previous + " -> " + name});
  }
}

std::string Scheduler::policyName() const {
  std::lock_guard lock(mutex_);
  return policy_->name();
}

policies::Snapshot Scheduler::snapshot(int64_t nowMs) {
  policies::Snapshot s;
  s.nowMs = nowMs;
  for (const auto& d : core_.devices()) {
    policies::DeviceState state;
    const DeviceInfo& info = d->info();
    state.id = info.id;
    state.software = info.software;
    state.memoryTotal = info.memoryBudget;
    state.memoryUsed = d->memoryUsed();
    state.speed = nominalSpeed(info);
    const DeviceTelemetry t = telemetry_->read(info.id, nowMs);
    state.temperatureC = t.temperatureC;
    if (t.memoryUsed) state.memoryUsed = *t.memoryUsed;
    if (t.memoryTotal) state.memoryTotal = *t.memoryTotal;
    s.devices.push_back(state);
  }
  for (const auto& host : core_.models()) {
    const server::ModelSnapshot snap = host->snapshot();
    policies::ModelState m;
    m.name = snap.name;
    m.activeSessions = int(snap.sessions.size());
    m.lastUsedMs = snap.lastActiveMs;
    m.migrating = snap.migrating;
    for (const server::UnitSnapshot& u : snap.units) {
      // Weights read in place from the file take no device memory; KV always does.
      const size_t bytes = (u.residency == "device" ? u.weightBytes : 0) + u.kvBytes;
      m.units.push_back({u.name, u.device, bytes, u.pinned});
    }
    s.models.push_back(std::move(m));
  }
  return s;
}

void Scheduler::execute(const policies::Action& action) {
  auto& events = core_.events();
  try {
    auto host = core_.find(action.model);
    const int layers = int(host->model().config().layers);
    server::MigrationRequest request;
    request.reason = action.reason;
    std::string what;
    if (action.kind == policies::ActionKind::kMigrate) {
      request.layers = runtime::unitRangeName({action.first, action.last}, layers);
      request.target = &core_.device(action.target);
      what = "migrating " + request.layers + " of " + action.model + " to " + action.target;
    } else {
      // Paging out: the CPU reads weights in place from the mapped file, so moving there frees
      // the device memory and keeps the model usable.
      for (const auto& d : core_.devices()) {
        if (d->info().backend == Backend::kCpu) request.target = d.get();
      }
      JITLLM_REQUIRE(request.target != nullptr, "no CPU device to page ", action.model, " out to");
      what = "paging " + action.model + " out to " + request.target->info().id;
    }
    host->migrate(request);
    events.emit({0, server::EventKind::kMigration, "scheduler.acted", action.model, request.target->info().id, 0,
                 what + ": " + action.reason});
  } catch (const Error& e) {
    events.emit({0, server::EventKind::kMigration, "scheduler.skipped", action.model, action.target, 0,
                 std::string("could not act on '") + action.reason + "': " + e.what()});
  }
}

std::vector<policies::Action> Scheduler::tick(int64_t nowMs) {
  const policies::Snapshot s = snapshot(nowMs);
  std::vector<policies::Action> plan;
  {
    std::lock_guard lock(mutex_);
    plan = policy_->plan(s);
  }
  // A model runs one migration at a time: the first action per model is carried out, the rest
  // wait for a later tick, where the policy plans them again from where things then are.
  std::vector<policies::Action> done;
  std::set<std::string> acted;
  for (const auto& a : plan) {
    if (!acted.insert(a.model).second) continue;
    execute(a);
    done.push_back(a);
  }
  return done;
}

}  // namespace jitllm::scheduler
