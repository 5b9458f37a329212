#include "daemon/server/model_migrations.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>

#include "engine/runtime/live_migration.h"
#include "engine/runtime/tensor_parallel_switch.h"
#include "engine/runtime/unit_range.h"

namespace jitllm::server {

// The migration the worker is running, with its ticket: a move (LiveMigration) or a change of
// split (TensorParallelSwitch), which take the same steps.
struct ModelMigrations::Running {
  std::shared_ptr<MigrationTicket> ticket;
  std::unique_ptr<runtime::LiveMigration> migration;
  std::unique_ptr<runtime::TensorParallelSwitch> split;
  bool prepared = false;
  std::vector<std::string> before;  // each unit's device when it started

  bool prepareStep() { return migration ? migration->prepareStep() : split->prepareStep(); }
  void commit() { migration ? migration->commit() : split->commit(); }
  std::string describe() const { return migration ? migration->describe() : split->describe(); }
  runtime::UnitRange units() const { return migration ? migration->options().units : split->options().units; }
  bool staged(int unit) const { return migration && migration->staged(unit); }
  runtime::MigrationStats stats() const {
    if (migration) return migration->stats();
    const runtime::TensorParallelStats& t = split->stats();
    runtime::MigrationStats m;
    m.units = t.units;
    m.from = t.from;
    m.weightBytes = t.weightBytes;
    m.bytesPrecopied = t.bytesPrecopied;
    m.bytesInPause = t.bytesInPause;
    m.prepareMs = t.prepareMs;
    m.pauseMs = t.pauseMs;
    m.sessions = t.sessions;
    return m;
  }
};

namespace {

// Whether a migration request names `device` (its target, or one of a split's devices).
bool names(const MigrationRequest& r, const Device* device) {
  return r.target == device || std::find(r.split.begin(), r.split.end(), device) != r.split.end();
}

// Whether unit `u` runs on `device`, wholly or as one of the devices its block is split over.
bool runsOn(const runtime::Model& model, int u, const Device* device) {
  const runtime::UnitInfo info = model.unitInfo(u);
  return info.device == device || std::find(info.shards.begin(), info.shards.end(), device) != info.shards.end();
}

// Whether this iteration's locks cover every device a migration request names.
bool holdsAll(const DeviceLocks& locks, const MigrationRequest& r) {
  if (!locks.holds(r.target)) return false;
  for (const Device* d : r.split) {
    if (!locks.holds(d)) return false;
  }
  return true;
}

// Migration ids are unique in the daemon, so events of two models' migrations never mix.
std::atomic<uint64_t> nextMigrationId{1};

}  // namespace

ModelMigrations::ModelMigrations(std::string modelName, runtime::Model& model, EventHub& events,
                                 ServingMetrics* metrics)
    : name_(std::move(modelName)),
      model_(model),
      events_(events),
      metrics_(metrics),
      pins_(size_t(model.unitCount())) {}

ModelMigrations::~ModelMigrations() = default;

std::shared_ptr<MigrationTicket> ModelMigrations::request(MigrationRequest request) {
  JITLLM_REQUIRE(request.target != nullptr, "a migration needs a target device");
  const int layers = int(model_.config().layers);
  const runtime::UnitRange range = runtime::parseUnitRange(request.layers, layers);
  MigrationResult identity;
  identity.model = name_;
  identity.firstName = runtime::unitName(range.first, layers);
  identity.lastName = runtime::unitName(range.last, layers);
  identity.to = request.target->info().id.str();
  for (size_t i = 1; i < request.split.size(); i++) {
    identity.to += '+';
    identity.to += request.split[i]->info().id.str();
  }
  JITLLM_REQUIRE(request.split.empty() || request.split[0] == request.target,
                 "a tensor-parallel switch's target is its first device");
  std::lock_guard lock(mutex_);
  JITLLM_REQUIRE(!busy_, "model '", name_, "' is already migrating (",
                 publishedLine_.empty() ? "starting" : publishedLine_, "); wait for it to finish or cancel it");
  for (int u = range.first; u <= range.last && !request.force; u++) {
    const std::string& pin = pins_[size_t(u)];
    JITLLM_REQUIRE(pin.empty() || pin == request.target->info().id.str(), runtime::unitName(u, layers), " of '", name_,
                   "' is pinned to ", pin, "; unpin it (jitllmctl unpin ", name_, ":", runtime::unitName(u, layers),
                   ") or force the migration (--force)");
  }
  identity.id = nextMigrationId.fetch_add(1);
  pending_ = std::make_shared<MigrationTicket>(identity, request);
  busy_ = true;
  return pending_;
}

void ModelMigrations::unpin(const std::string& layers) {
  const runtime::UnitRange range = runtime::parseUnitRange(layers, int(model_.config().layers));
  {
    std::lock_guard lock(mutex_);
    for (int u = range.first; u <= range.last; u++) pins_[size_t(u)].clear();
  }
  events_.emit({0, EventKind::kMigration, "layers.unpinned", name_, "", 0,
                "unpinned " + runtime::unitRangeName(range, int(model_.config().layers)) + " of " + name_});
}

bool ModelMigrations::busy() const {
  std::lock_guard lock(mutex_);
  return busy_;
}

ModelMigrations::Published ModelMigrations::published() const {
  std::lock_guard lock(mutex_);
  return {pins_, publishedLine_, busy_, pagedOut_, home_};
}

void ModelMigrations::addRequestedDevices(std::vector<Device*>& devices) const {
  std::lock_guard lock(mutex_);
  if (!pending_) return;
  devices.push_back(pending_->request().target);
  for (Device* d : pending_->request().split) devices.push_back(d);
}

void ModelMigrations::ended() {
  running_.reset();
  std::lock_guard lock(mutex_);
  busy_ = pending_ != nullptr;
}

void ModelMigrations::service(const DeviceLocks& locks) {
  if (!running_ && !start(locks)) return;
  if (!advance()) return;
  committed(*running_);
  // The requester hears of it once ps shows the new placement (after this iteration's publish),
  // and until then the model still counts as migrating: a snapshot that said "not migrating" with
  // the old placement let the scheduler plan its next move from units that had already moved.
  retiring_ = std::move(running_);
}

bool ModelMigrations::start(const DeviceLocks& locks) {
  std::shared_ptr<MigrationTicket> ticket;
  {
    std::lock_guard lock(mutex_);
    // Asked for after this iteration took its locks: the next iteration starts it (busy_ keeps
    // the worker looking).
    if (pending_ && !holdsAll(locks, pending_->request())) return false;
    ticket.swap(pending_);
  }
  if (!ticket) return false;
  const MigrationRequest& r = ticket->request();
  const int layers = int(model_.config().layers);
  auto started = std::make_unique<Running>();
  started->ticket = ticket;
  for (int u = 0; u < model_.unitCount(); u++) started->before.push_back(model_.unitDevice(u).info().id.str());
  try {
    if (r.split.empty()) {
      runtime::MigrationOptions o;
      o.units = runtime::parseUnitRange(r.layers, layers);  // checked in request()
      o.target = r.target;
      o.precopy = r.precopy;
      o.stageBudgetMs = 2;  // a few units per step: the replies' steps wait a couple of ms at most
      started->migration = std::make_unique<runtime::LiveMigration>(model_, o);
    } else {
      runtime::TensorParallelOptions o;
      o.units = runtime::parseUnitRange(r.layers, layers);
      o.devices = r.split;
      o.precopy = r.precopy;
      o.partialSums = r.partialSums;
      started->split = std::make_unique<runtime::TensorParallelSwitch>(model_, o);
    }
  } catch (const Error& e) {
    ticket->fail(e);
    ended();
    return false;
  }
  running_ = std::move(started);
  const runtime::MigrationStats st = running_->stats();
  events_.emit({0, EventKind::kMigration, "migration.preparing", name_, r.target->info().id.str(), 0,
                "migration " + std::to_string(ticket->id()) + ": " + running_->describe() + " (" +
                    std::to_string(st.units) + (r.split.empty() ? " units to move" : " blocks to split") +
                    (r.precopy ? ", pre-copying KV" : "") + ")"});
  return true;
}

bool ModelMigrations::advance() {
  Running& m = *running_;
  const std::string target = m.ticket->result().to;
  if (m.ticket->cancelled()) {
    m.ticket->fail(Error(ErrorKind::kFailed, "migration " + std::to_string(m.ticket->id()) + " was cancelled"));
    events_.emit({0, EventKind::kMigration, "migration.cancelled", name_, target, 0,
                  "migration " + std::to_string(m.ticket->id()) + " cancelled while preparing; " + name_ +
                      " stays where it was"});
    ended();
    return false;
  }
  try {
    if (!m.prepared) {
      m.prepared = m.prepareStep();
      if (m.prepared) {
        events_.emit({0, EventKind::kMigration, "migration.prepared", name_, target, 0,
                      "migration " + std::to_string(m.ticket->id()) + ": " + m.describe()});
      }
      return false;
    }
    m.commit();
    return true;
  } catch (const std::exception& thrown) {
    // A bug of ours (anything but an Error) fails the migration, not the daemon: the model stays
    // where it was, every other client is served on, and the log says what broke.
    const auto* error = dynamic_cast<const Error*>(&thrown);
    const Error e = error ? *error : Error(ErrorKind::kFailed, std::string("internal error: ") + thrown.what());
    if (!error) spdlog::error("model '{}': migration {}: {}", name_, m.ticket->id(), e.what());
    spdlog::warn("model '{}': migration {} failed: {}", name_, m.ticket->id(), e.what());
    m.ticket->fail(e);
    events_.emit({0, EventKind::kMigration, "migration.failed", name_, target, 0,
                  "migration " + std::to_string(m.ticket->id()) + " failed: " + e.what() + "; " + name_ +
                      " stays where it was"});
    ended();
    return false;
  }
}

void ModelMigrations::committed(Running& m) {
  // Pins follow the units that were forced off theirs; pinAfter pins the whole range.
  const MigrationRequest& r = m.ticket->request();
  const runtime::UnitRange range = m.units();
  const runtime::MigrationStats st = m.stats();
  const std::string target = m.ticket->result().to;
  const int layers = int(model_.config().layers);
  {
    std::lock_guard lock(mutex_);
    for (int u = range.first; u <= range.last; u++) {
      std::string& pin = pins_[size_t(u)];
      if (r.pinAfter || !pin.empty()) pin = r.target->info().id.str();
    }
    // A page-out remembers where the model ran, so a request for it can bring it home; any other
    // migration makes its placement the model's own again.
    if (metrics_)
      metrics_->migrationCommitted(name_, st.pauseMs / 1000.0, r.pageOut && !pagedOut_, pagedOut_ && !r.pageOut);
    if (r.pageOut && !pagedOut_) home_ = m.before;
    pagedOut_ = r.pageOut;
    if (!pagedOut_) home_.clear();
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "pause %.3f ms, prepare %.1f ms, %s pre-copied, %s in the pause, %d sessions, 0 tokens recomputed",
                st.pauseMs, st.prepareMs, humanBytes(st.bytesPrecopied).c_str(), humanBytes(st.bytesInPause).c_str(),
                st.sessions);
  events_.emit({0, EventKind::kMigration, "migration.committed", name_, target, 0,
                (r.split.empty() ? "migrated " : "split ") + runtime::unitRangeName(range, layers) + " of " + name_ +
                    " " + (st.from.empty() ? target : st.from) + "->" + target +
                    (r.reason.empty() ? "" : " (" + r.reason + ")") + ": " + line});
  if (r.pinAfter) {
    events_.emit({0, EventKind::kMigration, "layers.pinned", name_, target, 0,
                  "pinned " + runtime::unitRangeName(range, layers) + " of " + name_ + " to " + target});
  }
  committed_ = {m.ticket, st};
}

void ModelMigrations::afterStep() {
  if (retiring_ && !running_) retiring_.reset();
}

std::string ModelMigrations::stagedOn(int unit) const {
  return running_ && running_->staged(unit) ? running_->ticket->result().to : std::string();
}

void ModelMigrations::publish() {
  std::string line =
      running_ ? "migration " + std::to_string(running_->ticket->id()) + ": " + running_->describe() : std::string();
  std::lock_guard lock(mutex_);
  publishedLine_ = std::move(line);
  if (committed_.first) busy_ = pending_ != nullptr;  // the committed placement is visible now
}

void ModelMigrations::announce() {
  if (!committed_.first) return;
  committed_.first->succeed(committed_.second);
  committed_ = {};
}

void ModelMigrations::deviceLost(const Device& lost, const Device& fallback, const std::string& cause) {
  const std::string id = lost.info().id.str();
  // A migration to or from the device cannot finish; the model stays where it was, less the device.
  if (running_) {
    const runtime::UnitRange range = running_->units();
    bool involved = names(running_->ticket->request(), &lost);
    for (int u = range.first; u <= range.last; u++) involved = involved || runsOn(model_, u, &lost);
    if (involved) {
      running_->ticket->fail(Error(ErrorKind::kDisconnected, cause + " during the migration"));
      events_.emit({0, EventKind::kMigration, "migration.failed", name_, id, 0,
                    "migration " + std::to_string(running_->ticket->id()) + " failed: " + cause});
      ended();
    }
  }
  retiring_.reset();  // the last migration's source may be on the device: let it go now
  std::lock_guard lock(mutex_);
  if (pending_ && names(pending_->request(), &lost)) {
    pending_->fail(Error(ErrorKind::kDisconnected, cause + " before the migration started"));
    pending_.reset();
    busy_ = running_ != nullptr;
  }
  for (std::string& pin : pins_) {
    if (pin == id) pin.clear();  // a pin to a device that is gone cannot win
  }
  for (std::string& h : home_) {
    if (h == id) h = fallback.info().id.str();
  }
}

void ModelMigrations::shutdown(const Error& why) {
  std::lock_guard lock(mutex_);
  if (pending_) pending_->fail(why);
  if (running_) running_->ticket->fail(why);
  pending_.reset();
  busy_ = false;
}

}  // namespace jitllm::server
