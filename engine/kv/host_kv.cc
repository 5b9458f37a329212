#include "engine/kv/host_kv.h"

#include <algorithm>

#include "base/error.h"

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
    pageBytes_ = pool.layout().pageBytes();
    pageTokens_ = pool.layout().pageTokens;
    windows_.push_back(session.layerWindow(l));
    // The live pages only: a sliding-window layer's first ones are freed.
    const size_t first = session.firstLivePage(l);
    const size_t end = std::max(first, writtenPages(length_, pool.layout()));
    JITLLM_ASSERT(end <= session.layerPageTableSize(l));
    firstPages_[size_t(l)] = first;
    std::vector<uint8_t>& out = layers_[size_t(l)];
    out.resize((end - first) * pageBytes_);
    if (end > first) {
      pool.device().gatherToHost(out.data(), session.pageAddresses(l).data() + first, end - first, pageBytes_);
    }
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
    std::vector<uint8_t*> addresses(session->pageAddresses(l).begin() + ptrdiff_t(first),
                                    session->pageAddresses(l).begin() + ptrdiff_t(first + pages));
    if (pages) session->layerPool(l).device().scatterFromHost(addresses.data(), in.data(), pages, pageBytes_);
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
  for (int l = 0; l < session.layerCount(); l++) {
    if (session.layerPageCount(l) > 0 && !session.layerPool(l).device().info().caps.hostMemory) return true;
  }
  return false;
}

}  // namespace jitllm::runtime
