#include "daemon/server/daemon_core.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <sstream>

#include "daemon/runtime/device_spec.h"
#include "kernels/error.h"

namespace jitllm::server {

DaemonCore::DaemonCore(DaemonConfig config) : config_(std::move(config)), access_(config_.adminGroup) {
  runtime::DeviceSpecOptions o;
  o.cpuThreads = config_.cpuThreads;
  devices_ = runtime::createDevices(config_.devices, o);
  for (const auto& d : devices_) {
    events_.emit({0, EventKind::kDevice, "device.added", "", d->info().id, 0,
                  d->info().name + ", " + std::to_string(d->info().memoryBudget >> 20) + " MiB"});
  }
}

DaemonCore::~DaemonCore() {
  std::map<std::string, std::shared_ptr<ModelHost>> models;
  {
    std::lock_guard lock(mutex_);
    models.swap(models_);
  }
  for (auto& [name, host] : models) host->shutdown();
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
  const std::string socket = config_.socketPath, devices = config_.devices;
  const int threads = config_.cpuThreads;
  config_ = fresh;
  config_.socketPath = socket;
  config_.devices = devices;
  config_.cpuThreads = threads;
  access_.setAdminGroup(config_.adminGroup);
  spdlog::set_level(spdlog::level::from_str(config_.logLevel));
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
    name = file->getString("general.name").value_or(std::filesystem::path(source).stem().string());
  }
  for (char& c : name) {
    if (c == ' ' || c == '/' || c == ':' || c < 0x20) c = '-';
  }
  JITLLM_REQUIRE(!name.empty() && name.size() <= 128, "model name '", name, "' must have 1 to 128 characters");
  {
    std::lock_guard lock(mutex_);
    JITLLM_REQUIRE(accepting_, "the daemon is stopping");
    JITLLM_REQUIRE(!models_.count(name), "a model named '", name, "' is already loaded; unload it or pick --name");
  }
  events_.emit({0, EventKind::kModel, "model.loading", name, "", 0, source});
  if (progress) progress("parsing", 1, 3);

  runtime::ModelLoadOptions options;
  if (request.devices.empty()) {
    for (const auto& d : devices_) options.devices.push_back(d.get());
  } else {
    std::stringstream in(request.devices);
    for (std::string id; std::getline(in, id, ',');) {
      Device* found = nullptr;
      for (const auto& d : devices_) {
        if (d->info().id == id) found = d.get();
      }
      JITLLM_REQUIRE(found != nullptr, "device '", id, "' is not one of the daemon's devices (see jitllmctl devices)");
      options.devices.push_back(found);
    }
  }
  JITLLM_REQUIRE(request.kvPrecision.empty() || request.kvPrecision == "f32" || request.kvPrecision == "f16",
                 "kv precision must be f32 or f16, not '", request.kvPrecision, "'");
  if (request.kvPrecision == "f16") options.kvPrecision = KvPrecision::kF16;
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
  hostOptions.maxQueuedTokens = cfg.maxQueuedTokens;
  auto host = std::make_shared<ModelHost>(name, source, std::move(model), hostOptions, events_);
  {
    std::lock_guard lock(mutex_);
    if (!accepting_ || models_.count(name)) {
      host->shutdown();
      JITLLM_FAIL(kFailed, accepting_ ? "a model named '" + name + "' was loaded meanwhile" : "the daemon is stopping");
    }
    models_[name] = host;
  }
  if (progress) progress("ready", 3, 3);
  events_.emit({0, EventKind::kModel, "model.loaded", name, "", 0,
                source + " (" + runtime::architectureName(host->model().config().arch) + ", " +
                    std::to_string(host->model().config().layers) + " layers)"});
  return host;
}

void DaemonCore::unload(const std::string& name) {
  std::shared_ptr<ModelHost> host;
  {
    std::lock_guard lock(mutex_);
    auto it = models_.find(name);
    JITLLM_REQUIRE(it != models_.end(), "no model named '", name, "' is loaded");
    host = it->second;
    models_.erase(it);
  }
  host->shutdown();
  events_.emit({0, EventKind::kModel, "model.unloaded", name, "", 0, ""});
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

Device& DaemonCore::device(const std::string& id) const {
  std::string known;
  for (const auto& d : devices_) {
    if (d->info().id == id) return *d;
    known += (known.empty() ? "" : ", ") + d->info().id;
  }
  JITLLM_FAIL(kFailed, "no device '", id, "' in this daemon; it has ", known, " (jitllmctl devices)");
}

std::shared_ptr<ModelHost> DaemonCore::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = models_.find(name);
  if (it != models_.end()) return it->second;
  std::string names;
  for (const auto& [n, h] : models_) names += (names.empty() ? "" : ", ") + n;
  JITLLM_FAIL(kFailed, "no model named '", name, "' is loaded (loaded: ", names.empty() ? "none" : names,
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

size_t DaemonCore::drain(std::chrono::milliseconds grace) {
  stopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + grace;
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
         std::to_string(devices_.size()) + " device(s)" + (accepting() ? "" : ", stopping");
}

}  // namespace jitllm::server
