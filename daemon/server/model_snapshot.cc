#include "daemon/server/model_snapshot.h"

#include <algorithm>

namespace jitllm::server {

namespace {

void addBytes(std::vector<std::pair<std::string, size_t>>& to, const std::string& device, size_t bytes) {
  auto it = std::find_if(to.begin(), to.end(), [&](const auto& e) { return e.first == device; });
  if (it == to.end()) {
    to.emplace_back(device, bytes);
  } else {
    it->second += bytes;
  }
}

}  // namespace

std::string_view sessionStateName(SessionState state) {
  switch (state) {
    case SessionState::kPrefill:
      return "prefill";
    case SessionState::kDecode:
      return "decode";
    case SessionState::kWaiting:
      return "waiting";
    case SessionState::kPreempted:
      return "preempted";
    case SessionState::kIdle:
      return "idle";
    case SessionState::kParked:
      return "parked";
  }
  return "prefill";
}

std::string_view residencyName(Residency residency) {
  switch (residency) {
    case Residency::kDevice:
      return "device";
    case Residency::kFile:
      return "file";
    case Residency::kStreamed:
      return "streamed";
  }
  return "file";
}

std::string_view modelStateName(ModelState state) {
  switch (state) {
    case ModelState::kPreparingKernels:
      return "preparing kernels";
    case ModelState::kReady:
      return "ready";
  }
  return "ready";
}

PlacementSnapshot snapshotPlacement(const runtime::Model& model, const std::vector<SessionPages>& sessions,
                                    const std::function<std::string(int)>& stagedOn) {
  PlacementSnapshot out;
  out.units.resize(size_t(model.unitCount()));
  for (int u = 0; u < model.unitCount(); u++) {
    const runtime::UnitInfo info = model.unitInfo(u);
    UnitSnapshot& s = out.units[size_t(u)];
    s.name = model.unitName(u);
    s.device = info.device->info().id.str();
    s.residency = info.streamed ? Residency::kStreamed : info.inDeviceMemory ? Residency::kDevice : Residency::kFile;
    s.weightBytes = info.weightBytes;
    s.kernelsReady = info.kernelsReady;
    if (!info.shards.empty()) {
      s.device.clear();
      for (const Device* d : info.shards) {
        if (!s.device.empty()) s.device += '+';
        s.device += d->info().id.str();
      }
    }
    s.stagedOn = stagedOn(u);
    if (u == 0 || u + 1 == model.unitCount()) continue;  // token_embd and output hold no KV
    // A split block's KV is on each of its devices, in pages of its share of the heads.
    addBytes(out.kvBytes, info.device->info().id.str(), 0);
    for (const Device* d : info.shards) addBytes(out.kvBytes, d->info().id.str(), 0);
    for (const SessionPages& p : sessions) {
      const runtime::Session& session = *p.session;
      size_t pages = 0;
      for (int j = 0; j < session.shardsOf(u - 1); j++) {
        const int t = session.tableOf(u - 1, j);
        const size_t n = session.layerPageCount(t);
        const size_t bytes = n * session.layerPool(t).layout().pageBytes();
        const std::string device = session.layerPool(t).device().info().id.str();
        pages += n;
        s.kvBytes += bytes;
        addBytes(out.kvBytes, device, bytes);
        if (p.idle) addBytes(out.idleKvBytes, device, bytes);
      }
      s.kvPages += pages;
      s.sessionPages.emplace_back(p.id, uint32_t(pages));
    }
  }
  return out;
}

}  // namespace jitllm::server
