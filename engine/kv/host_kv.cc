#include "engine/kv/host_kv.h"

#include <algorithm>

#include "base/error.h"
#include "engine/kv/kv_head_split.h"

namespace jitllm::runtime {
namespace {

size_t writtenPages(int64_t length, const KvLayout& layout) {
  return size_t((length + layout.pageTokens - 1) / layout.pageTokens);
}

}  // namespace

HostKv::HostKv(const Session& session) : length_(session.length()), contextLimit_(session.contextLimit()) {
  layers_.resize(size_t(session.layerCount()));
  firstPages_.resize(size_t(session.layerCount()));
  for (int l = 0; l < session.layerCount(); l++) {
    const KvPagePool& pool = session.layerPool(l);
    const int shards = session.shardsOf(l);
    // Kept whole: a tensor-parallel layer's shards joined into the one-device layout, so the KV
    // comes back however the layer is split when it does.
    whole_ = pool.layout();
    whole_.kvHeads *= shards;
    pageBytes_ = whole_.pageBytes();
    pageTokens_ = whole_.pageTokens;
    windows_.push_back(session.layerWindow(l));
    // The live pages only: a sliding-window layer's first ones are freed.
    const size_t first = session.firstLivePage(l);
    const size_t end = std::max(first, writtenPages(length_, whole_));
    JITLLM_ASSERT(end <= session.layerPageTableSize(l));
    firstPages_[size_t(l)] = first;
    std::vector<uint8_t>& out = layers_[size_t(l)];
    out.resize((end - first) * pageBytes_);
    if (end == first) continue;
    if (shards == 1) {
      pool.device().gatherToHost(out.data(), session.pageAddresses(l).data() + first, end - first, pageBytes_);
      continue;
    }
    std::vector<std::vector<uint8_t>> parts(static_cast<size_t>(shards));
    std::vector<const uint8_t*> from;
    for (int j = 0; j < shards; j++) {
      const int t = session.tableOf(l, j);
      const size_t bytes = session.layerPool(t).layout().pageBytes();
      parts[size_t(j)].resize((end - first) * bytes);
      session.layerPool(t).device().gatherToHost(parts[size_t(j)].data(), session.pageAddresses(t).data() + first,
                                                 end - first, bytes);
      from.push_back(parts[size_t(j)].data());
    }
    uint8_t* to[1] = {out.data()};
    relayHeads(whole_, end - first, from, to);
  }
}

std::unique_ptr<Session> HostKv::restore(Model& model) const {
  std::unique_ptr<Session> session = model.createSession(contextLimit_);
  JITLLM_REQUIRE(session->layerCount() == int(layers_.size()), "the parked KV has ", layers_.size(),
                 " layers, the model ", session->layerCount());
  JITLLM_REQUIRE(model.kvLayout().pageBytes() == pageBytes_ || layers_.empty(),
                 "the parked KV's pages are not the model's page size");
  session->resume(length_);  // OVERLOADED: the session (and what it took) goes with the exception
  for (int l = 0; l < session->layerCount(); l++) {
    const std::vector<uint8_t>& in = layers_[size_t(l)];
    const size_t first = firstPages_[size_t(l)];
    const size_t pages = in.size() / pageBytes_;
    JITLLM_REQUIRE(session->firstLivePage(l) == first, "the parked KV of layer ", l, " starts at page ", first,
                   ", the resumed session's at ", session->firstLivePage(l));
    if (pages == 0) continue;
    const int shards = session->shardsOf(l);
    std::vector<std::vector<uint8_t>> parts(size_t(shards > 1 ? shards : 0));
    std::vector<uint8_t*> to;
    for (auto& part : parts) {
      part.resize(in.size() / size_t(shards));
      to.push_back(part.data());
    }
    if (shards > 1) {
      const uint8_t* from[1] = {in.data()};
      relayHeads(whole_, pages, from, to);
    }
    for (int j = 0; j < shards; j++) {
      const int t = session->tableOf(l, j);
      std::vector<uint8_t*> addresses(session->pageAddresses(t).begin() + ptrdiff_t(first),
                                      session->pageAddresses(t).begin() + ptrdiff_t(first + pages));
      session->layerPool(t).device().scatterFromHost(addresses.data(), shards > 1 ? to[size_t(j)] : in.data(), pages,
                                                     session->layerPool(t).layout().pageBytes());
    }
  }
  return session;
}

bool HostKv::canTruncate(int64_t length) const {
  if (length < 0 || length > length_) return false;
  for (size_t l = 0; l < layers_.size(); l++) {
    if (firstPages_[l] > firstPageInWindow(windows_[l], pageTokens_, length)) return false;
  }
  return true;
}

size_t HostKv::bytes() const {
  size_t n = 0;
  for (const auto& l : layers_) n += l.size();
  return n;
}

bool holdsDeviceMemory(const Session& session) {
  for (int t = 0; t < session.tableCount(); t++) {
    if (session.layerInUse(t) && session.layerPageCount(t) > 0 &&
        !session.layerPool(t).device().info().caps.hostMemory) {
      return true;
    }
  }
  return false;
}

}  // namespace jitllm::runtime
