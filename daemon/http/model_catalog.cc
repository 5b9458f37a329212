#include "daemon/http/model_catalog.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "daemon/http/http_error.h"
#include "daemon/server/model_name.h"

namespace jitllm::server::http {
namespace {

constexpr const char* kExtension = ".gguf";

bool validName(const std::string& name) {
  try {
    requireValidModelName(name);
    return true;
  } catch (const Error&) {
    return false;
  }
}

int64_t modifiedUnix(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_mtime) : 0;
}

}  // namespace

ModelCatalog::ModelCatalog(DaemonCore& core, BackgroundThreads& background, kj::Timer& timer)
    : core_(core), background_(background), timer_(timer), sweeping_(sweep().eagerlyEvaluate([](kj::Exception&& e) {
        spdlog::error("http: keep-alive sweep stopped: {}", e.getDescription().cStr());
      })) {}

std::vector<ModelCatalog::Entry> ModelCatalog::list() const {
  std::vector<Entry> out;
  std::set<std::string> seen;
  for (const auto& host : core_.models()) {
    out.push_back({host->name(), host->path(), true, host->loadedUnixMs() / 1000});
    seen.insert(host->name());
  }
  std::vector<Entry> files;
  for (const auto& dir : core_.config().modelDirs) {
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
      if (f.path().extension() != kExtension || !f.is_regular_file(ec)) continue;
      const std::string name = f.path().stem().string();
      if (!validName(name) || !seen.insert(name).second) continue;
      files.push_back({name, f.path().string(), false, modifiedUnix(f.path().string())});
    }
  }
  auto byName = [](const Entry& a, const Entry& b) { return a.name < b.name; };
  std::sort(out.begin(), out.end(), byName);
  std::sort(files.begin(), files.end(), byName);
  out.insert(out.end(), files.begin(), files.end());
  return out;
}

std::string ModelCatalog::fileFor(const std::string& name) const {
  if (!validName(name)) return {};
  for (const auto& dir : core_.config().modelDirs) {
    const std::string path = (std::filesystem::path(dir) / (name + kExtension)).string();
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return path;
  }
  return {};
}

kj::Promise<std::shared_ptr<ModelHost>> ModelCatalog::acquire(const std::string& name,
                                                              std::optional<double> keepAliveSeconds) {
  auto touch = [this, name, keepAliveSeconds] {
    auto it = onDemand_.find(name);
    if (it == onDemand_.end()) return;
    if (keepAliveSeconds) it->second.keepAliveSeconds = *keepAliveSeconds;
    it->second.lastUsed = std::chrono::steady_clock::now();
    it->second.requests++;
  };
  for (const auto& host : core_.models()) {
    if (host->name() == name) {
      touch();
      return core_.route(name);  // the model or one of its replicas
    }
  }
  auto loading = loading_.find(name);
  if (loading == loading_.end()) {
    const std::string path = fileFor(name);
    if (path.empty()) {
      throw HttpError(404, "invalid_request_error",
                      "the model '" + clipped(name) + "' does not exist (GET /v1/models lists the models there are)",
                      "model", "model_not_found");
    }
    if (!core_.config().autoLoad) {
      throw HttpError(404, "invalid_request_error",
                      "the model '" + name + "' is not loaded, and auto_load is off (jitllmctl load " + path + ")",
                      "model", "model_not_loaded");
    }
    spdlog::info("http: loading '{}' on demand from {}", name, path);
    auto request = std::make_shared<LoadRequest>();
    request->path = path;
    request->name = name;
    std::function<bool()> work = [this, request] {
      core_.load(*request, nullptr);
      return true;
    };
    auto loaded = background_.run(work).then(
        [this, name](bool) {
          loading_.erase(name);
          OnDemand& d = onDemand_[name];
          d.keepAliveSeconds = core_.config().keepAliveSeconds;
          d.lastUsed = std::chrono::steady_clock::now();
        },
        [this, name](kj::Exception&& e) {
          loading_.erase(name);
          kj::throwFatalException(kj::mv(e));
        });
    loading = loading_.emplace(name, loaded.fork()).first;
  }
  return loading->second.addBranch().then([this, name, touch]() -> kj::Promise<std::shared_ptr<ModelHost>> {
    for (const auto& host : core_.models()) {
      if (host->name() == name) {
        touch();
        return std::shared_ptr<ModelHost>(host);
      }
    }
    // Loaded and unloaded again before this request got to it: load it once more.
    return acquire(name, std::nullopt);
  });
}

void ModelCatalog::released(const std::string& name) {
  auto it = onDemand_.find(name);
  if (it == onDemand_.end()) return;
  it->second.lastUsed = std::chrono::steady_clock::now();
  it->second.requests = std::max(0, it->second.requests - 1);
}

kj::Promise<void> ModelCatalog::sweep() {
  return timer_.afterDelay(kSweepInterval).then([this] {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = onDemand_.begin(); it != onDemand_.end();) {
      const std::string name = it->first;
      const OnDemand d = it->second;  // a copy: the entry may be erased below
      std::shared_ptr<ModelHost> host;
      for (const auto& h : core_.models()) {
        if (h->name() == name) host = h;
      }
      if (!host) {  // unloaded by someone else
        it = onDemand_.erase(it);
        continue;
      }
      const bool expired = d.keepAliveSeconds >= 0 && d.requests == 0 && host->jobCount() == 0 &&
                           now - d.lastUsed >= std::chrono::duration<double>(d.keepAliveSeconds);
      if (!expired) {
        ++it;
        continue;
      }
      it = onDemand_.erase(it);
      spdlog::info("http: unloading '{}': no request for its keep-alive of {} s", name, d.keepAliveSeconds);
      std::function<bool()> work = [this, name] {
        core_.unload(name);
        return true;
      };
      background_.run(work).detach([name](kj::Exception&& e) {
        spdlog::warn("http: unloading '{}' failed: {}", name, e.getDescription().cStr());
      });
    }
    return sweep();
  });
}

}  // namespace jitllm::server::http
