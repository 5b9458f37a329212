#include "engine/devices/backend_registry.h"

#include <set>

#include "base/error.h"

namespace jitllm::runtime {

void BackendRegistry::add(std::unique_ptr<Backend> backend) {
  JITLLM_REQUIRE(backend != nullptr, "a null backend");
  JITLLM_REQUIRE(find(backend->name()) == nullptr, "backend '", backend->name(), "' is registered twice");
  backends_.push_back(std::move(backend));
}

Backend* BackendRegistry::find(std::string_view name) const {
  for (const auto& b : backends_) {
    if (b->name() == name) return b.get();
  }
  return nullptr;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.push_back(b->name());
  return out;
}

Backend& BackendRegistry::require(const DeviceId& id) const {
  Backend* b = find(id.backend);
  if (b == nullptr) {
    std::string known;
    for (const auto& backend : backends_) known += (known.empty() ? "" : ", ") + backend->name();
    JITLLM_FAIL(kFailed, "device '", id, "': unknown backend '", id.backend, "' (this build has ", known, ")");
  }
  return *b;
}

std::unique_ptr<Device> BackendRegistry::open(const DeviceRequest& request, int hostThreads) {
  DeviceOpenOptions o;
  o.id = request.id;
  o.memoryCap = request.memoryCap;
  o.hostThreads = hostThreads;
  return require(request.id).open(o);
}

std::vector<std::unique_ptr<Device>> BackendRegistry::open(std::string_view spec, int hostThreads) {
  if (spec == "auto") return openAll(hostThreads).devices;
  const std::vector<DeviceRequest> list = parseDeviceList(spec);
  for (const DeviceRequest& r : list) require(r.id);  // every name checked before anything opens
  std::vector<std::unique_ptr<Device>> devices;
  for (const DeviceRequest& r : list) devices.push_back(open(r, hostThreads));
  return devices;
}

AllDevices BackendRegistry::openAll(int hostThreads) {
  AllDevices all;
  std::set<std::string> uuids;
  for (const auto& backend : backends_) {
    Enumeration e = backend->enumerate(nullptr);
    for (const FoundDevice& f : e.devices) {
      if (!f.uuid.empty() && uuids.count(f.uuid)) continue;  // the same GPU, already there through another backend
      DeviceOpenOptions o;
      o.id = {f.backend, f.index};
      o.hostThreads = hostThreads;
      try {
        all.devices.push_back(e.open(f, o));
        if (!all.devices.back()->info().uuid.empty()) uuids.insert(all.devices.back()->info().uuid);
      } catch (const Error& error) {
        all.skipped.push_back(o.id.str() + ": " + error.what());
      }
    }
  }
  return all;
}

Enumeration BackendRegistry::enumerateArrivals() {
  std::vector<Enumeration> parts;
  Enumeration merged;
  for (const auto& backend : backends_) {
    if (!backend->findsArrivals()) continue;
    parts.push_back(backend->enumerate(nullptr));
    for (const FoundDevice& f : parts.back().devices) merged.devices.push_back(f);
    for (const std::string& c : parts.back().complete) merged.complete.push_back(c);
  }
  merged.open = [parts = std::move(parts)](const FoundDevice& f,
                                           const DeviceOpenOptions& o) -> std::unique_ptr<Device> {
    for (const Enumeration& part : parts) {
      for (const FoundDevice& mine : part.devices) {
        if (mine.backend == f.backend && mine.index == f.index) return part.open(f, o);
      }
    }
    JITLLM_FAIL(kFailed, "device ", f.backend, ":", f.index, " (", f.name, ") is not in this enumeration");
  };
  return merged;
}

}  // namespace jitllm::runtime
