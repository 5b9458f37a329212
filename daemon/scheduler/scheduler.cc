#include "daemon/scheduler/scheduler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>

#include "base/error.h"
#include "engine/runtime/unit_range.h"

namespace jitllm::scheduler {
namespace {

std::string knownPolicies() {
  std::string names;
  for (const auto& n : policies::policyNames()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// The policies' name for each of the daemon's tiers, in ServiceTier's order (most urgent first).
constexpr std::array<policies::Tier, server::kServiceTiers> kPolicyTiers = {
    policies::Tier::kInteractive, policies::Tier::kStandard, policies::Tier::kBatch};
static_assert(size_t(server::ServiceTier::kBatch) + 1 == server::kServiceTiers);

policies::Tier policyTier(server::ServiceTier tier) { return kPolicyTiers[size_t(tier)]; }

// TODO(cleanup): server::ModelSnapshot names devices as text (a unit's device, its pin, a paged-out
// model's home, idle KV per device), so each tick parses them back into the DeviceIds they were
// made from; ModelSnapshot is being reworked on another branch, and once it carries DeviceIds
// (and a split block's devices as a list) deviceList() and optionalDevice() go.

// "cuda:0+cuda:1" (a block split over devices, as ps shows it) -> its devices.
std::vector<DeviceId> deviceList(const std::string& devices) {
  std::vector<DeviceId> ids;
  for (size_t at = 0; at <= devices.size();) {
    const size_t plus = std::min(devices.find('+', at), devices.size());
    ids.push_back(DeviceId::parse(std::string_view(devices).substr(at, plus - at)));
    at = plus + 1;
  }
  return ids;
}

std::optional<DeviceId> optionalDevice(const std::string& id) {
  return id.empty() ? std::nullopt : std::optional(DeviceId::parse(id));
}

// The device an event names for an action ("" for none).
std::string targetName(const policies::Action& action) { return action.target ? action.target->str() : ""; }

// The device an action that moves something names (a policy's bug when it names none).
const DeviceId& targetOf(const policies::Action& action) {
  JITLLM_ASSERT(action.target.has_value());
  return *action.target;
}

}  // namespace

Scheduler::Scheduler(server::DaemonCore& core, std::unique_ptr<TelemetrySource> telemetry,
                     policies::PolicyConfig config, const std::string& policy)
    : core_(core), telemetry_(std::move(telemetry)), config_(config) {
  if (!telemetry_) telemetry_ = std::make_unique<NoTelemetry>();
  for (const server::DeviceStatus& status : core_.deviceTable().all()) known_.insert(status.device);
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

Scheduler::Readings Scheduler::readAll(int64_t nowMs) {
  Readings readings;
  const auto wallNow = std::chrono::steady_clock::now();
  std::lock_guard lock(busyMutex_);
  for (const server::DeviceStatus& status : core_.deviceTable().all()) {
    Device& d = *status.device;
    // Found since the source was made (re-enumeration): it may need to look the device up.
    if (known_.insert(&d).second) telemetry_->deviceAdded(d.info().id.str(), d.info().uuid);
    DeviceTelemetry t = telemetry_->read(d.info().id.str(), nowMs);
    // Where the source does not know the memory, the driver may (VK_EXT_memory_budget): the
    // device is as full as the larger of our accounting and its figure, out of the smaller of
    // our cap and what the driver lets this process have now (other programs take their share).
    if (!t.memoryUsed && !t.memoryTotal) {
      if (const auto m = d.driverMemory()) {
        t.memoryUsed = std::max(m->used, d.memoryUsed());
        t.memoryTotal = std::min(m->available, d.info().memoryBudget);
      }
    }
    // Utilisation from our own executors where no vendor counter gives one: the share of the wall
    // time since the last tick that step loops spent on the device (a display figure: it uses
    // the real clock, not the scheduler's).
    const uint64_t busy = d.busyNanoseconds();
    auto last = lastBusy_.find(&d);
    if (last != lastBusy_.end() && std::isnan(t.utilization)) {
      const double wall = std::chrono::duration<double, std::nano>(wallNow - last->second.second).count();
      if (wall > 0) t.utilization = std::min(1.0, double(busy - last->second.first) / wall);
    }
    lastBusy_[&d] = {busy, wallNow};
    readings[d.info().id.str()] = t;
  }
  return readings;
}

policies::Snapshot Scheduler::snapshot(int64_t nowMs) { return snapshot(nowMs, readAll(nowMs)); }

policies::Snapshot Scheduler::snapshot(int64_t nowMs, const Readings& readings) {
  policies::Snapshot s;
  s.nowMs = nowMs;
  for (const auto& d : core_.devices()) {
    policies::DeviceState state;
    const DeviceInfo& info = d->info();
    state.id = info.id;
    state.software = info.software;
    state.memoryTotal = info.memoryBudget;
    state.memoryUsed = d->memoryUsed();
    state.speed = core_.deviceTable().speed(*d);
    state.promised = core_.promised(info.id.str());
    const auto found = readings.find(info.id.str());
    const DeviceTelemetry t = found == readings.end() ? DeviceTelemetry{} : found->second;  // added since
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
    m.resident = !snap.pagedOut;
    for (const std::string& home : snap.home) m.home.push_back(DeviceId::parse(home));
    for (const auto& [device, bytes] : snap.idleKvBytesByDevice) m.idleKv.emplace_back(DeviceId::parse(device), bytes);
    // Per tier: its counters (tiers that finished a reply) and the replies running now.
    auto tierOf = [&m](server::ServiceTier serviceTier) -> policies::TierState& {
      const policies::Tier tier = policyTier(serviceTier);
      for (auto& t : m.tiers) {
        if (t.tier == tier) return t;
      }
      m.tiers.push_back({tier, 0, 0, 0});
      return m.tiers.back();
    };
    for (const server::TierGoodput& g : snap.goodput) {
      policies::TierState& t = tierOf(g.tier);
      t.finished = g.finished;
      t.met = g.met;
    }
    for (const server::SessionSnapshot& session : snap.sessions) tierOf(session.tier).active++;
    m.replicaOf = host->options().replicaOf;
    const runtime::ModelConfig& config = host->model().config();
    for (int k : {2, 4}) {
      if (config.kvHeads % k == 0 && config.feedForward % k == 0) m.splits.push_back(k);
    }
    for (const server::UnitSnapshot& u : snap.units) {
      // Weights read in place from the file take no device memory; KV always does.
      const size_t bytes = u.bytesInDeviceMemory();
      std::vector<DeviceId> devices = deviceList(u.device);
      policies::UnitState unit{u.name, devices.front(), bytes, optionalDevice(u.pinned), u.weightBytes};
      // A block split over devices ("cuda:0+cuda:1"): the policies move it only by another
      // tensor-parallel switch.
      if (devices.size() > 1) unit.split = std::move(devices);
      m.units.push_back(std::move(unit));
    }
    s.models.push_back(std::move(m));
  }
  return s;
}

void Scheduler::execute(const policies::Action& action) {
  auto& events = core_.events();
  try {
    auto host = core_.find(action.model);
    if (action.kind == policies::ActionKind::kParkKv) {
      host->parkIdleSessions(action.reason);  // the model's worker reports what it parked
      events.emit({0, server::EventKind::kMigration, "scheduler.acted", action.model, targetName(action), 0,
                   "parking the KV of " + action.model + "'s idle sessions in host RAM: " + action.reason});
      return;
    }
    if (action.kind == policies::ActionKind::kReplicate || action.kind == policies::ActionKind::kDropReplica) {
      // (Loading a replica blocks this tick for its load, seconds at most: its kernels are cached.)
      const std::string what =
          action.kind == policies::ActionKind::kReplicate
              ? "replicated " + action.model + " as " + core_.replicate(action.model, targetOf(action))->name()
              : "dropped replica " + action.model;
      if (action.kind == policies::ActionKind::kDropReplica) {
        JITLLM_REQUIRE(!host->options().replicaOf.empty(), "'", action.model, "' is not a replica");
        core_.unload(action.model);
      }
      events.emit({0, server::EventKind::kMigration, "scheduler.acted", action.model, targetName(action), 0,
                   what + ": " + action.reason});
      return;
    }
    const int layers = int(host->model().config().layers);
    server::MigrationRequest request;
    request.reason = action.reason;
    std::string what;
    if (action.kind == policies::ActionKind::kSplit) {
      request.layers = runtime::unitRangeName({action.first, action.last}, layers);
      for (const DeviceId& id : action.devices) request.split.push_back(&core_.device(id));
      JITLLM_REQUIRE(!request.split.empty(), "a split names its devices");
      request.target = request.split.front();
      what = "splitting " + request.layers + " of " + action.model + " over " + std::to_string(action.devices.size()) +
             " device(s)";
    } else if (action.kind == policies::ActionKind::kMigrate) {
      const std::string target = targetOf(action).str();
      request.layers = runtime::unitRangeName({action.first, action.last}, layers);
      request.target = &core_.device(targetOf(action));
      what = "migrating " + request.layers + " of " + action.model + " to " + target;
      // Moving a paged-out model's units home counts as paging it in; until all are, it stays out.
      const server::ModelSnapshot snap = host->snapshot();
      if (snap.pagedOut) {
        bool allHome = true;
        for (int u = 0; u < int(snap.units.size()) && u < int(snap.home.size()); u++) {
          const bool moving = u >= action.first && u <= action.last;
          allHome = allHome && (moving ? target : snap.units[size_t(u)].device) == snap.home[size_t(u)];
        }
        request.pageOut = !allHome;
        what = "paging " + request.layers + " of " + action.model + " in to " + target;
      }
    } else {
      request.target = core_.pageOutTarget();
      JITLLM_REQUIRE(request.target != nullptr, "no CPU device to page ", action.model, " out to");
      request.pageOut = true;
      what = "paging " + action.model + " out to " + request.target->info().id.str();
    }
    host->migrate(request);
    events.emit({0, server::EventKind::kMigration, "scheduler.acted", action.model, request.target->info().id.str(), 0,
                 what + ": " + action.reason});
  } catch (const Error& e) {
    events.emit({0, server::EventKind::kMigration, "scheduler.skipped", action.model, targetName(action), 0,
                 std::string("could not act on '") + action.reason + "': " + e.what()});
  }
}

void Scheduler::followDevices(const Readings& readings) {
  for (const server::DeviceStatus& status : core_.deviceTable().all()) {
    const DeviceId& id = status.device->info().id;
    const auto found = readings.find(id.str());
    if (found == readings.end()) continue;  // added since the readings were taken: next tick
    const DeviceTelemetry& t = found->second;
    if (t.present && !*t.present && status.online) {
      core_.deviceLost(id, "the telemetry source reports it gone");
    } else if (status.online && !status.device->responsive()) {
      // The periodic health check: a GPU that fell off the bus or was reset fails every call.
      core_.deviceLost(id, "it stopped answering");
    } else if (t.present && *t.present && !status.online) {
      core_.deviceArrived(id, "the telemetry source reports it back");
    }
    if (status.online) {
      core_.deviceTable().setReadings(id, {t.temperatureC, t.utilization, t.powerWatts, t.throttle});
    }
  }
}

std::vector<policies::Action> Scheduler::tick(int64_t nowMs) {
  const Readings readings = readAll(nowMs);
  followDevices(readings);
  const policies::Snapshot s = snapshot(nowMs, readings);
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
