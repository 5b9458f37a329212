#include "engine/runtime/session.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::runtime {

Session* SessionRegistry::find(uint64_t id) const {
  for (Session* s : sessions_) {
    if (s->id() == id) return s;
  }
  return nullptr;
}

void SessionRegistry::remove(Session* s) { std::erase(sessions_, s); }

Session::Session(uint64_t id, int64_t contextLimit, std::vector<KvPagePool*> layerPools, SessionRegistry* registry)
    : id_(id), contextLimit_(contextLimit), registry_(registry) {
  JITLLM_REQUIRE(contextLimit > 0, "session context limit must be positive");
  layers_.resize(layerPools.size());
  for (size_t i = 0; i < layerPools.size(); i++) layers_[i].pool = layerPools[i];
  if (registry_) registry_->add(this);
}

Session::~Session() {
  if (registry_) registry_->remove(this);
  for (auto& layer : layers_) {
    for (PageId p : layer.pages) layer.pool->free(p);
  }
}

void Session::reserve(int64_t tokens) {
  JITLLM_REQUIRE(tokens >= 0, "negative token count");
  const int64_t needed = length_ + tokens;
  JITLLM_REQUIRE(needed <= contextLimit_, "context limit exceeded: the session holds ", length_, " tokens, ", tokens,
                 " more would pass its limit of ", contextLimit_);
  for (auto& layer : layers_) {
    const int64_t pageTokens = layer.pool->layout().pageTokens;
    const size_t pagesNeeded = size_t((needed + pageTokens - 1) / pageTokens);
    while (layer.pages.size() < pagesNeeded) {
      const PageId p = layer.pool->allocate();
      layer.pages.push_back(p);
      layer.addresses.push_back(layer.pool->address(p));
    }
  }
}

void Session::advance(int64_t tokens) {
  JITLLM_ASSERT(tokens >= 0 && length_ + tokens <= contextLimit_);
  length_ += tokens;
}

void Session::truncate(int64_t length) {
  JITLLM_REQUIRE(length >= 0 && length <= length_, "cannot truncate a session of ", length_, " tokens to ", length);
  if (length < length_) rewinds_++;
  length_ = length;
}

KvSlot Session::slotFor(int layer, int64_t position) const {
  const LayerPages& l = layers_[size_t(layer)];
  const int64_t pageTokens = l.pool->layout().pageTokens;
  const size_t page = size_t(position / pageTokens);
  JITLLM_ASSERT(page < l.addresses.size());
  return {l.addresses[page], int(position % pageTokens)};
}

size_t Session::pageCount() const {
  size_t n = 0;
  for (const auto& l : layers_) n += l.pages.size();
  return n;
}

void Session::rebindLayer(int layer, KvPagePool& pool, std::vector<PageId>& pages,
                          std::vector<uint8_t*>& addresses) noexcept {
  LayerPages& l = layers_[size_t(layer)];
  JITLLM_ASSERT(pages.size() == l.pages.size() && addresses.size() == pages.size());
  l.pool = &pool;
  l.pages.swap(pages);
  l.addresses.swap(addresses);
}

}  // namespace jitllm::runtime
