#include "daemon/server/daemon_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "daemon/server/model_name.h"
#include "engine/devices/builtin_backends.h"
#include "engine/devices/speed_probe.h"
#include "policies/load_placement.h"

namespace jitllm::server {

namespace {

std::vector<std::unique_ptr<Device>> openDevices(const DaemonConfig& config) {
  runtime::BackendRegistry backends = runtime::builtinBackends();
  if (config.devices == "auto") {
    runtime::AllDevices all = backends.openAll(config.cpuThreads);
    for (const std::string& s : all.skipped) spdlog::warn("device {} (left out)", s);
    return std::move(all.devices);
  }
  return backends.open(config.devices, config.cpuThreads);
}

// KV a resident model was placed with room for (one session at its default context) but does not
// use yet, per block unit on `device`: a newcomer must not take it.
size_t promisedKv(const ModelHost& host, const ModelSnapshot& snap, const std::string& device) {
  const KvLayout& kv = host.model().kvLayout();
  const size_t perBlock =
      2 * size_t(kv.kvHeads) * size_t(kv.headDim) * kv.elementBytes() * size_t(host.options().defaultContext);
  size_t promised = 0;
  for (size_t u = 1; u + 1 < snap.units.size(); u++) {
    const UnitSnapshot& unit = snap.units[u];
    if (unit.device == device && unit.kvBytes < perBlock) promised += perBlock - unit.kvBytes;
  }
  return promised;
}

policies::PlacementDevice placementView(const Device& d, size_t promised, double speed) {
  policies::PlacementDevice p;
  const DeviceInfo& info = d.info();
  p.id = info.id;
  p.speed = speed;
  p.software = info.software;
  p.weightsInMemory = !info.caps.hostMemory;  // the CPU reads weights from the mapped file
  p.memoryTotal = info.memoryBudget;
  const size_t used = d.memoryUsed();
  p.memoryFree = used + promised < info.memoryBudget ? info.memoryBudget - used - promised : 0;
  return p;
}

}  // namespace

DaemonCore::DaemonCore(DaemonConfig config)
    : config_(std::move(config)), access_(config_.adminGroup), devices_(openDevices(config_)) {
  for (Device* d : devices_.online()) {
    events_.emit({0, EventKind::kDevice, "device.added", "", d->info().id.str(), 0, describe(*d) + probeSpeed(*d)});
  }
  // With `devices = auto` the daemon owns what is plugged in later too (CUDA's devices are fixed
  // per process; a new GPU comes through Vulkan).
  if (config_.devices == "auto") enumerator_ = [] { return runtime::builtinBackends().enumerateArrivals(); };
}

std::string DaemonCore::describe(const Device& d) {
  return d.info().name + ", " + std::to_string(d.info().memoryBudget >> 20) + " MiB";
}

std::string DaemonCore::probeSpeed(Device& d) {
  if (!config_.speedProbe) return {};
  const std::string key = runtime::speedKey(d);
  bool measured = false;
  try {
    std::lock_guard lock(speedsMutex_);
    if (!speeds_.count(key)) speeds_[key] = runtime::decodeSpeed(d, cacheRoot(), &measured);
    devices_.setMeasuredSpeed(d.info().id, speeds_[key]);
    char line[96];
    std::snprintf(line, sizeof line, ", decode probe %.1f GB/s%s", speeds_[key], measured ? " (measured now)" : "");
    return line;
  } catch (const Error& e) {
    // A device capped below the probe's 17 MB, say: placement uses its nominal speed.
    return std::string(", no decode probe (") + e.what() + "), nominal speed";
  }
}

void DaemonCore::setDeviceEnumerator(DeviceEnumerator enumerator) {
  std::lock_guard lock(rescanMutex_);
  enumerator_ = std::move(enumerator);
}

bool DaemonCore::rescans() const {
  std::lock_guard lock(rescanMutex_);
  return enumerator_ != nullptr;
}

DaemonCore::Rescan DaemonCore::rescanDevices() {
  std::lock_guard lock(rescanMutex_);
  Rescan outcome;
  if (!enumerator_) return outcome;
  Enumeration now = enumerator_();
  std::set<std::string> seen;
  for (const FoundDevice& f : now.devices) {
    seen.insert(f.uuid);
    Device* known = devices_.findByUuid(f.uuid);
    if (known && devices_.isOnline(known->info().id)) continue;
    // Back after it went away: the object we have may be dead (a device lost stays lost). One that
    // still answers simply comes back; a dead one is opened again under its id - unless it was lost
    // through CUDA and is found through Vulkan, which makes it a new Vulkan device (CUDA cannot
    // open it again in this process).
    const bool answers = known && known->responsive();
    if (known && !answers && known->info().id.backend != f.backend) known = nullptr;
    try {
      if (known) {
        const DeviceId id = known->info().id;
        if (answers) {
          deviceArrived(id, "found again by re-enumeration (" + f.name + ")");
        } else {
          DeviceOpenOptions o;
          o.id = id;
          o.hostThreads = config_.cpuThreads;
          devices_.replace(id, now.open(f, o));
          probeSpeed(*devices_.find(id));
          deviceArrivedAlready(id, "found again by re-enumeration (" + f.name + ")");
        }
        outcome.back.push_back(id);
      } else {
        DeviceOpenOptions o;
        o.id = {f.backend, devices_.freeIndex(f.backend)};
        o.hostThreads = config_.cpuThreads;
        std::unique_ptr<Device> d = now.open(f, o);
        Device* added = d.get();
        devices_.add(std::move(d));
        events_.emit({0, EventKind::kDevice, "device.added", "", added->info().id.str(), 0,
                      describe(*added) + probeSpeed(*added) + ", found by re-enumeration"});
        spdlog::info("device {} arrived: {}", added->info().id.str(), describe(*added));
        outcome.added.push_back(added->info().id);
      }
    } catch (const Error& e) {
      spdlog::warn("re-enumeration found {} but could not open it: {}", f.name, e.what());
    }
  }
  for (const DeviceStatus& s : devices_.all()) {
    const DeviceInfo& info = s.device->info();
    if (!s.online || info.uuid.empty() || !now.isComplete(info.id.backend) || seen.count(info.uuid)) continue;
    if (deviceLost(info.id, "it is no longer enumerated")) outcome.lost.push_back(info.id);
  }
  return outcome;
}

DaemonCore::~DaemonCore() {
  std::map<std::string, std::shared_ptr<ModelHost>> models;
  {
    std::lock_guard lock(mutex_);
    models.swap(models_);
  }
  for (auto& [name, host] : models) host->shutdown();
  std::vector<std::thread> faults;
  {
    std::lock_guard lock(mutex_);
    faults.swap(faultThreads_);
  }
  for (auto& t : faults) t.join();
}

DaemonConfig DaemonCore::config() const {
  std::lock_guard lock(mutex_);
  return config_;
}

std::vector<std::string> DaemonCore::reload(const DaemonConfig& fresh) {
  std::vector<std::string> needRestart;
  std::lock_guard lock(mutex_);
  if (fresh.socketPath != config_.socketPath) needRestart.push_back("socket");
  if (fresh.devices != config_.devices) needRestart.push_back("devices");
  if (fresh.cpuThreads != config_.cpuThreads) needRestart.push_back("cpu_threads");
  if (fresh.http != config_.http) needRestart.push_back("http");
  const std::string socket = config_.socketPath, devices = config_.devices;
  const int threads = config_.cpuThreads;
  const std::vector<std::string> http = config_.http;
  config_ = fresh;
  config_.http = http;
  config_.socketPath = socket;
  config_.devices = devices;
  config_.cpuThreads = threads;
  access_.setAdminGroup(config_.adminGroup);
  spdlog::set_level(spdlog::level::from_str(config_.logLevel));
  for (auto& [name, host] : models_) host->setTiers(config_.tiers);
  return needRestart;
}

std::string DaemonCore::resolveModelPath(const std::string& path) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  JITLLM_REQUIRE(!ec, "cannot resolve '", path, "': ", ec.message());
  for (const auto& dir : config_.modelDirs) {
    const fs::path d = fs::weakly_canonical(dir, ec);
    if (ec) continue;
    auto rel = canonical.lexically_relative(d);
    if (!rel.empty() && *rel.begin() != "..") return canonical.string();
  }
  std::string dirs;
  for (const auto& d : config_.modelDirs) dirs += (dirs.empty() ? "" : ", ") + d;
  JITLLM_FAIL(kFailed, "'", path, "' is not under the daemon's model directories (", dirs.empty() ? "none" : dirs,
              "); pass the file itself instead (jitllmctl load does)");
}

std::shared_ptr<ModelHost> DaemonCore::load(const LoadRequest& request, const LoadProgress& progress) {
  DaemonConfig cfg = config();
  std::unique_ptr<gguf::GgufFile> file;
  std::string source;
  if (request.fd >= 0) {
    source = request.path.empty() ? "fd:" + std::to_string(request.fd) : request.path;
    if (progress) progress("mapping", 0, 1);
    file = gguf::GgufFile::openFd(request.fd, source);
  } else {
    std::string path;
    {
      std::lock_guard lock(mutex_);
      path = resolveModelPath(request.path);
    }
    source = path;
    if (progress) progress("mapping", 0, 1);
    file = gguf::GgufFile::open(path);
  }
  std::string name = request.name;
  if (name.empty()) {
    name = modelNameFrom(file->getString("general.name").value_or(std::filesystem::path(source).stem().string()));
  }
  requireValidModelName(name);
  {
    std::lock_guard lock(mutex_);
    JITLLM_REQUIRE(accepting_, "the daemon is stopping");
    JITLLM_REQUIRE(!models_.count(name), "a model named '", name, "' is already loaded; unload it or pick --name");
  }
  events_.emit({0, EventKind::kModel, "model.loading", name, "", 0, source});
  if (progress) progress("parsing", 1, 3);

  runtime::ModelLoadOptions options;
  // Its sessions' default limit (the model clamps it to its trained context): what LongRoPE's
  // choice of factors follows.
  options.contextSize = request.contextSize > 0 ? request.contextSize : cfg.defaultContext;
  if (request.devices.empty()) {
    options.devices = devices();
    JITLLM_REQUIRE(!options.devices.empty(), "the daemon has no device online to place '", name, "' on");
  } else {
    for (const DeviceId& id : request.devices) options.devices.push_back(&device(id));
  }
  // One device named, or none: placement chooses. Several named: blocks spread over them in order.
  const bool evenSpread = options.devices.size() > 1 && !request.devices.empty();
  options.placer = [&](const std::vector<size_t>& weightBytes, size_t kvPerToken, int64_t trained, size_t workspace) {
    if (progress) progress("placing", 1, 3);
    // Room for one session at the model's default context on each device it runs on.
    const int64_t kvContext = request.contextSize > 0 ? request.contextSize : std::min(trained, cfg.defaultContext);
    return placeNewModel(name, options.devices, evenSpread, weightBytes, kvPerToken, kvContext, workspace,
                         request.maxDeviceBytes, options.streamed);
  };
  if (request.kvPrecision) options.kvPrecision = *request.kvPrecision;
  std::unique_ptr<runtime::Model> model;
  try {
    model = runtime::Model::fromFile(std::move(file), options);
  } catch (const Error& e) {
    events_.emit({0, EventKind::kModel, "model.load_failed", name, "", 0, e.what()});
    throw;
  }
  if (progress) progress("binding", 2, 3);
  JITLLM_REQUIRE(model->hasTokenizer(), source, ": the file has no tokenizer; jitllmd serves text models only");

  ModelHostOptions hostOptions;
  const int64_t trained = model->config().contextLength;
  hostOptions.defaultContext = request.contextSize > 0 ? request.contextSize : std::min(trained, cfg.defaultContext);
  JITLLM_REQUIRE(hostOptions.defaultContext <= trained, "context size ", hostOptions.defaultContext,
                 " is larger than the model's trained context of ", trained);
  hostOptions.maxSessions = cfg.maxSessions;
  hostOptions.idleSessions = cfg.idleSessions;
  hostOptions.maxQueuedTokens = cfg.maxQueuedTokens;
  hostOptions.deviceFault = [this](const std::string& model) { deviceFault(model); };
  hostOptions.metrics = &metrics_;
  hostOptions.tiers = cfg.tiers;
  auto host = start(name, source, std::move(model), hostOptions, progress);
  events_.emit({0, EventKind::kModel, "model.loaded", name, "", 0,
                source + " (" + runtime::architectureName(host->model().config().arch) + ", " +
                    std::to_string(host->model().config().layers) + " layers)"});
  return host;
}

std::shared_ptr<ModelHost> DaemonCore::start(const std::string& name, const std::string& source,
                                             std::unique_ptr<runtime::Model> model, const ModelHostOptions& options,
                                             const LoadProgress& progress) {
  auto host = std::make_shared<ModelHost>(name, source, std::move(model), options, events_);
  {
    std::lock_guard lock(mutex_);
    if (!accepting_ || models_.count(name)) {
      host->shutdown();
      JITLLM_FAIL(kFailed, accepting_ ? "a model named '" + name + "' was loaded meanwhile" : "the daemon is stopping");
    }
    models_[name] = host;
  }
  // Its kernels are made before load returns (ps shows it "preparing kernels" meanwhile), so the
  // first request does not wait for a compile.
  if (progress) progress("preparing kernels", 2, 3);
  try {
    host->waitUntilPrepared();
  } catch (const Error& e) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = models_.find(name); it != models_.end() && it->second == host) models_.erase(it);
    }
    host->shutdown();
    events_.emit({0, EventKind::kModel, "model.load_failed", name, "", 0, e.what()});
    throw;
  }
  if (progress) progress("ready", 3, 3);
  return host;
}

std::shared_ptr<ModelHost> DaemonCore::replicate(const std::string& name, const DeviceId& id) {
  const std::shared_ptr<ModelHost> primary = find(name);
  JITLLM_REQUIRE(primary->options().replicaOf.empty(), "'", name, "' is a replica of '", primary->options().replicaOf,
                 "'; replicate that one");
  Device& target = device(id);
  // NAME#2, NAME#3, ...: the lowest number free.
  std::string replica;
  {
    std::lock_guard lock(mutex_);
    JITLLM_REQUIRE(accepting_, "the daemon is stopping");
    for (int n = 2; replica.empty(); n++) {
      if (!models_.count(name + "#" + std::to_string(n))) replica = name + "#" + std::to_string(n);
    }
  }
  const runtime::Model& original = primary->model();
  for (const Device* d : original.devices()) {
    JITLLM_REQUIRE(d != &target, "'", name, "' runs on ", id.str(), " already; a replica there would only share it");
  }
  events_.emit({0, EventKind::kModel, "model.loading", replica, id.str(), 0, "a replica of " + name});
  runtime::ModelLoadOptions options;
  options.devices = {&target};
  options.contextSize = primary->options().defaultContext;
  options.kvPrecision = original.kvLayout().precision;
  options.kvPageTokens = original.kvLayout().pageTokens;
  options.placement.assign(size_t(original.unitCount()), 0);
  std::unique_ptr<runtime::Model> model;
  try {
    model = runtime::Model::fromFile(gguf::GgufFile::share(original.file()), options);
  } catch (const Error& e) {
    events_.emit({0, EventKind::kModel, "model.load_failed", replica, id.str(), 0, e.what()});
    throw;
  }
  ModelHostOptions hostOptions = primary->options();
  hostOptions.replicaOf = name;
  auto host = start(replica, primary->path(), std::move(model), hostOptions, {});
  events_.emit({0, EventKind::kModel, "model.loaded", replica, id.str(), 0,
                "a replica of " + name + " on " + id.str() + ": requests for " + name + " are shared with it"});
  return host;
}

std::shared_ptr<ModelHost> DaemonCore::route(const std::string& name) const {
  std::shared_ptr<ModelHost> best = find(name);
  size_t bestJobs = best->jobCount();
  std::vector<std::shared_ptr<ModelHost>> replicas;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [n, host] : models_) {
      if (host->options().replicaOf == name) replicas.push_back(host);
    }
  }
  for (const auto& r : replicas) {
    const size_t jobs = r->jobCount();
    if (jobs < bestJobs) {
      best = r;
      bestJobs = jobs;
    }
  }
  return best;
}

void DaemonCore::unload(const std::string& name) {
  std::vector<std::shared_ptr<ModelHost>> hosts;  // the model, then its replicas
  {
    std::lock_guard lock(mutex_);
    auto it = models_.find(name);
    JITLLM_REQUIRE(it != models_.end(), "no model named '", clipped(name), "' is loaded");
    hosts.push_back(it->second);
    models_.erase(it);
    for (auto r = models_.begin(); r != models_.end();) {
      if (r->second->options().replicaOf != name) {
        ++r;
        continue;
      }
      hosts.push_back(r->second);
      r = models_.erase(r);
    }
  }
  for (const auto& host : hosts) {
    host->shutdown();
    events_.emit(
        {0, EventKind::kModel, "model.unloaded", host->name(), "", 0, host == hosts.front() ? "" : "with " + name});
  }
}

void DaemonCore::setPolicyControl(PolicyControl* control) {
  std::lock_guard lock(mutex_);
  policyControl_ = control;
}

PolicyControl& DaemonCore::policyControl() const {
  std::lock_guard lock(mutex_);
  if (policyControl_ == nullptr)
    JITLLM_FAIL(kUnimplemented, "this jitllmd runs without a scheduler (scheduler_interval_ms = 0)");
  return *policyControl_;
}

Device& DaemonCore::device(const DeviceId& id) const {
  std::string known;
  for (const DeviceStatus& s : devices_.all()) {
    if (s.device->info().id == id) {
      JITLLM_REQUIRE(s.online, "device '", id, "' is offline (", s.offlineReason, ")");
      return *s.device;
    }
    if (s.online) known += (known.empty() ? "" : ", ") + s.device->info().id.str();
  }
  JITLLM_FAIL(kFailed, "no device '", id, "' in this daemon; it has ", known.empty() ? "none online" : known,
              " (jitllmctl devices)");
}

std::vector<int> DaemonCore::placeNewModel(const std::string& name, const std::vector<Device*>& candidates,
                                           bool evenSpread, const std::vector<size_t>& weightBytes,
                                           size_t kvPerTokenPerBlock, int64_t contextTokens, size_t workspaceBytes,
                                           size_t maxDeviceBytes, std::vector<bool>& streamed) {
  const size_t units = weightBytes.size();
  policies::LoadSnapshot s;
  policies::PlacementRequest& r = s.request;
  r.weightBytes = weightBytes;
  r.kvBytes.assign(units, kvPerTokenPerBlock * size_t(std::max<int64_t>(contextTokens, 1)));
  r.kvBytes.front() = r.kvBytes.back() = 0;
  r.maxDeviceBytes = maxDeviceBytes;
  r.workspaceBytes = workspaceBytes;
  r.headroom = 0;  // the device budgets already keep their reserve
  if (evenSpread) s.fixed = runtime::evenPlacement(int(units) - 2, int(candidates.size()));
  s.stream = config().spill == "stream";
  auto gather = [&](bool offerIdle) {
    s.devices.clear();
    for (Device* d : candidates) s.devices.push_back(view(*d));
    s.models = offerIdle ? loadedModels(s.devices) : std::vector<policies::LoadedModel>{};
  };
  gather(true);
  policies::LoadPlan plan = policies::planLoad(s);
  if (!plan.makeRoom.empty()) {
    for (const policies::RoomToMake& room : plan.makeRoom) makeRoom(*candidates[room.device], room, name);
    // Planned again from what is free now, with no model offered: a load pages out once.
    gather(false);
    plan = policies::planLoad(s);
  }
  if (!plan.placement.ok) JITLLM_FAIL(kOverloaded, "'", name, "' ", plan.placement.why);
  for (const std::string& line : plan.placed) events_.emit({0, EventKind::kModel, "model.placed", name, "", 0, line});
  streamed = plan.placement.streamed;
  return plan.placement.unitDevice;
}

std::vector<policies::LoadedModel> DaemonCore::loadedModels(const std::vector<policies::PlacementDevice>& on) const {
  std::vector<policies::LoadedModel> loaded;
  for (const auto& host : models()) loaded.push_back(loadedModel(*host, on));
  return loaded;
}

policies::LoadedModel DaemonCore::loadedModel(const ModelHost& host,
                                              const std::vector<policies::PlacementDevice>& on) const {
  const ModelSnapshot snap = host.snapshot();
  policies::LoadedModel m;
  m.name = host.name();
  m.lastUsedMs = snap.lastActiveMs;
  m.busy = !snap.sessions.empty() || snap.migrating;
  m.frees.assign(on.size(), 0);
  for (const UnitSnapshot& u : snap.units) {
    m.pinned = m.pinned || !u.pinned.empty();
    // TODO(cleanup): matched as text because ModelSnapshot names devices so (it is being reworked on
    // another branch); compare DeviceIds once it carries them.
    for (size_t d = 0; d < on.size(); d++) {
      if (on[d].id.str() == u.device) m.frees[d] += u.bytesInDeviceMemory();
    }
  }
  for (size_t d = 0; d < on.size(); d++) m.frees[d] += promisedKv(host, snap, on[d].id.str());
  return m;
}

policies::PlacementDevice DaemonCore::view(const Device& device) const {
  return placementView(device, promised(device.info().id.str()), devices_.speed(device));
}

size_t DaemonCore::promised(const std::string& device) const {
  size_t bytes = 0;
  for (const auto& host : models()) bytes += promisedKv(*host, host->snapshot(), device);
  return bytes;
}

Device* DaemonCore::pageOutTarget(const Device* except) const {
  for (Device* d : devices()) {
    if (d->info().caps.hostMemory && d != except) return d;
  }
  return nullptr;
}

void DaemonCore::makeRoom(Device& device, const policies::RoomToMake& room, const std::string& forModel) {
  auto freeNow = [&] { return view(device).memoryFree; };
  Device* host = pageOutTarget(&device);
  if (!host) return;  // nowhere to page out to
  std::map<std::string, std::shared_ptr<ModelHost>> byName;
  for (const auto& m : models()) byName[m->name()] = m;
  for (const std::string& name : room.models) {
    if (freeNow() >= room.bytes) break;
    const auto found = byName.find(name);
    if (found == byName.end()) continue;  // unloaded since the plan
    const std::shared_ptr<ModelHost>& model = found->second;
    // As the model is now: busy since the plan, or paged out by an earlier room of it, it stays.
    const policies::LoadedModel now = loadedModel(*model, {view(device)});
    if (!policies::mayMakeRoom(now) || now.frees[0] == 0) continue;
    MigrationRequest request;
    request.target = host;
    request.pageOut = true;
    request.reason = device.info().id.str() + " has " + policies::mebibytes(freeNow()) + " free and '" + forModel +
                     "' needs " + policies::mebibytes(room.bytes);
    try {
      auto ticket = model->migrate(request);
      events_.emit({0, EventKind::kMigration, "scheduler.acted", model->name(), host->info().id.str(), 0,
                    "paging " + model->name() + " out to " + host->info().id.str() + ": " + request.reason});
      ticket->wait(std::chrono::minutes(5));
      if (auto e = ticket->error()) {
        events_.emit({0, EventKind::kMigration, "scheduler.skipped", model->name(), host->info().id.str(), 0,
                      "could not page " + model->name() + " out: " + e->what()});
      }
    } catch (const Error& e) {
      events_.emit({0, EventKind::kMigration, "scheduler.skipped", model->name(), host->info().id.str(), 0,
                    "could not page " + model->name() + " out: " + e.what()});
    }
  }
}

bool DaemonCore::deviceLost(const DeviceId& id, const std::string& why) {
  Device* lost = devices_.find(id);
  if (!lost || !devices_.setOnline(id, false, why)) return false;
  const std::string name = id.str();
  events_.emit({0, EventKind::kDevice, "device.removed", "", name, 0, name + " went away: " + why});
  spdlog::warn("device {} went away: {}", name, why);
  const std::vector<Device*> left = devices();
  // Every model hears of it: those with units there are re-placed, and one migrating to it (its
  // units not there yet) fails that migration.
  const std::vector<std::shared_ptr<ModelHost>> affected = models();
  if (affected.empty()) return true;
  if (left.empty()) {
    for (const auto& host : affected) {
      events_.emit({0, EventKind::kModel, "model.replace_failed", host->name(), name, 0,
                    "no device is left to run " + host->name() + " on; unloading it"});
    }
    for (const auto& host : affected) {
      if (!host->options().replicaOf.empty()) continue;  // goes with its model
      unload(host->name());
    }
    return true;
  }
  // Each model goes to the best device left with room for what ran on the lost one (weights from
  // the file; the KV there is gone with its sessions); the CPU, reading the file in place, always has.
  std::vector<std::pair<std::shared_ptr<ModelHost>, Device*>> plans;
  for (const auto& host : affected) {
    size_t weights = 0;
    for (const UnitSnapshot& u : host->snapshot().units) weights += u.device == name ? u.weightBytes : 0;
    std::vector<policies::PlacementDevice> v;
    for (Device* d : left) v.push_back(view(*d));
    Device* fallback = left.front();
    for (int k : policies::preferenceOrder(v)) {
      const auto& d = v[size_t(k)];
      if (!d.weightsInMemory || d.memoryFree >= weights) {
        fallback = left[size_t(k)];
        break;
      }
    }
    plans.emplace_back(host, fallback);
  }
  std::mutex m;
  std::condition_variable cv;
  size_t pending = plans.size();
  for (auto& [host, fallback] : plans) {
    host->deviceLost(*lost, *fallback, why, [&] {
      std::lock_guard lock(m);
      if (--pending == 0) cv.notify_all();
    });
  }
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return pending == 0; });
  return true;
}

bool DaemonCore::deviceArrived(const DeviceId& id, const std::string& why) {
  if (!devices_.setOnline(id, true, "")) return false;
  deviceArrivedAlready(id, why);
  return true;
}

void DaemonCore::deviceArrivedAlready(const DeviceId& id, const std::string& why) {
  events_.emit({0, EventKind::kDevice, "device.added", "", id.str(), 0, id.str() + " is online: " + why});
  spdlog::info("device {} is online: {}", id.str(), why);
}

void DaemonCore::deviceFault(const std::string& model) {
  std::set<std::string> used;
  try {
    for (const UnitSnapshot& u : find(model)->snapshot().units) used.insert(u.device);
  } catch (const Error&) {
    return;  // unloaded meanwhile
  }
  for (Device* d : devices()) {
    if (!used.count(d->info().id.str()) || d->responsive()) continue;
    // Re-placing runs on the model's worker, which is the thread calling: hand it to another.
    std::lock_guard lock(mutex_);
    faultThreads_.emplace_back([this, id = d->info().id] { deviceLost(id, "it stopped answering"); });
  }
}

std::shared_ptr<ModelHost> DaemonCore::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = models_.find(name);
  if (it != models_.end()) return it->second;
  std::string names;
  for (const auto& [n, h] : models_) names += (names.empty() ? "" : ", ") + n;
  JITLLM_FAIL(kFailed, "no model named '", clipped(name), "' is loaded (loaded: ", names.empty() ? "none" : names,
              "); load one with jitllmctl load FILE");
}

std::vector<std::shared_ptr<ModelHost>> DaemonCore::models() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<ModelHost>> out;
  for (const auto& [n, h] : models_) out.push_back(h);
  return out;
}

void DaemonCore::stopAccepting() {
  std::lock_guard lock(mutex_);
  accepting_ = false;
}

bool DaemonCore::accepting() const {
  std::lock_guard lock(mutex_);
  return accepting_;
}

std::shared_ptr<DaemonCore::AdmissionGuard> DaemonCore::admitGeneration() {
  std::lock_guard lock(mutex_);
  if (!accepting_) JITLLM_FAIL(kDisconnected, "jitllmd is stopping; no new generations");
  admissions_++;
  return std::make_shared<AdmissionGuard>(*this);
}

DaemonCore::AdmissionGuard::~AdmissionGuard() {
  {
    std::lock_guard lock(core_.mutex_);
    core_.admissions_--;
  }
  core_.admissionsEnded_.notify_all();
}

size_t DaemonCore::drain(std::chrono::milliseconds grace) {
  stopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  {
    // Requests still on their way reach their models first (or fail) before the models are waited for.
    std::unique_lock lock(mutex_);
    admissionsEnded_.wait_until(lock, deadline, [&] { return admissions_ == 0; });
  }
  size_t cancelled = 0;
  for (auto& host : models()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!host->waitIdle(std::max(left, std::chrono::milliseconds(0)))) cancelled += host->jobCount();
  }
  std::map<std::string, std::shared_ptr<ModelHost>> models;
  {
    std::lock_guard lock(mutex_);
    models.swap(models_);
  }
  for (auto& [name, host] : models) host->shutdown();
  return cancelled;
}

std::string DaemonCore::statusLine() const {
  const auto hosts = models();
  size_t sessions = 0;
  for (const auto& h : hosts) sessions += h->jobCount();
  return std::to_string(hosts.size()) + " model(s), " + std::to_string(sessions) + " session(s), " +
         std::to_string(devices().size()) + " device(s)" + (accepting() ? "" : ", stopping");
}

}  // namespace jitllm::server
