#include "engine/kv/host_kv.h"

#include "base/error.h"

namespace jitllm::runtime {
namespace {

size_t writtenPages(int64_t length, const KvLayout& layout) {
  return size_t((length + layout.pageTokens - 1) / layout.pageTokens);
}

}  // namespace

HostKv::HostKv(const Session& session) : length_(session.length()), contextLimit_(session.contextLimit()) {
  layers_.resize(size_t(session.layerCount()));
  for (int l = 0; l < session.layerCount(); l++) {
    const KvPagePool& pool = session.layerPool(l);
    pageBytes_ = pool.layout().pageBytes();
    const size_t pages = writtenPages(length_, pool.layout());
    JITLLM_ASSERT(pages <= session.layerPageCount(l));
    std::vector<uint8_t>& out = layers_[size_t(l)];
    out.resize(pages * pageBytes_);
    if (pages) pool.device().gatherToHost(out.data(), session.pageAddresses(l).data(), pages, pageBytes_);
  }
}

std::unique_ptr<Session> HostKv::restore(Model& model) const {
  std::unique_ptr<Session> session = model.createSession(contextLimit_);
  JITLLM_REQUIRE(session->layerCount() == int(layers_.size()), "the parked KV has ", layers_.size(),
                 " layers, the model ", session->layerCount());
  JITLLM_REQUIRE(model.kvLayout().pageBytes() == pageBytes_ || layers_.empty(),
                 "the parked KV's pages are not the model's page size");
  session->reserve(length_);  // OVERLOADED: the session (and what it took) goes with the exception
  for (int l = 0; l < session->layerCount(); l++) {
    const std::vector<uint8_t>& in = layers_[size_t(l)];
    const size_t pages = in.size() / pageBytes_;
    std::vector<uint8_t*> addresses(session->pageAddresses(l).begin(), session->pageAddresses(l).begin() + pages);
    if (pages) session->layerPool(l).device().scatterFromHost(addresses.data(), in.data(), pages, pageBytes_);
  }
  session->advance(length_);
  return session;
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
