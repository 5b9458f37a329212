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

Session::Session(uint64_t id, int64_t contextLimit, std::vector<KvPagePool*> layerPools, SessionRegistry* registry,
                 std::vector<int64_t> layerWindows)
    : id_(id), contextLimit_(contextLimit), registry_(registry) {
  JITLLM_REQUIRE(contextLimit > 0, "session context limit must be positive");
  JITLLM_REQUIRE(layerWindows.empty() || layerWindows.size() == layerPools.size(), layerWindows.size(),
                 " sliding windows for ", layerPools.size(), " layers");
  layerCount_ = int(layerPools.size());
  layers_.resize(layerPools.size() * kMaxShards);
  for (size_t i = layerPools.size(); i < layers_.size(); i++) {
    layers_[i].window = layerWindows.empty() ? 0 : layerWindows[i % layerPools.size()];
  }
  for (size_t i = 0; i < layerPools.size(); i++) {
    layers_[i].pool = layerPools[i];
    layers_[i].window = layerWindows.empty() ? 0 : layerWindows[i];
    JITLLM_REQUIRE(layers_[i].window >= 0, "negative sliding window");
  }
  if (registry_) registry_->add(this);
}

Session::~Session() {
  if (registry_) registry_->remove(this);
  for (auto& layer : layers_) {
    for (PageId p : layer.pages) {
      if (p != kNoPage && layer.pool) layer.pool->free(p);
    }
  }
}

size_t firstPageInWindow(int64_t window, int64_t pageTokens, int64_t length) {
  if (window == 0) return 0;
  const int64_t windowStart = std::max<int64_t>(0, length - window + 1);
  return size_t(windowStart / pageTokens);
}

void Session::allocatePages(int64_t length) {
  for (auto& layer : layers_) {
    if (!layer.pool) continue;
    const int64_t pageTokens = layer.pool->layout().pageTokens;
    const size_t pagesNeeded = size_t((length + pageTokens - 1) / pageTokens);
    while (layer.pages.size() < pagesNeeded) {
      const PageId p = layer.pool->allocate();
      layer.pages.push_back(p);
      layer.addresses.push_back(layer.pool->address(p));
    }
  }
}

void Session::reserve(int64_t tokens) {
  JITLLM_REQUIRE(tokens >= 0, "negative token count");
  const int64_t needed = length_ + tokens;
  JITLLM_REQUIRE(needed <= contextLimit_, "context limit exceeded: the session holds ", length_, " tokens, ", tokens,
                 " more would pass its limit of ", contextLimit_);
  allocatePages(needed);
}

void Session::advance(int64_t tokens) {
  JITLLM_ASSERT(tokens >= 0 && length_ + tokens <= contextLimit_);
  length_ += tokens;
  for (auto& layer : layers_) {
    if (!layer.pool) continue;
    const size_t behind = std::min(firstNeededPage(layer, length_), layer.pages.size());
    for (; layer.firstLive < behind; layer.firstLive++) {
      layer.pool->free(layer.pages[layer.firstLive]);
      layer.pages[layer.firstLive] = kNoPage;
      layer.addresses[layer.firstLive] = nullptr;
    }
  }
}

bool Session::canTruncate(int64_t length) const {
  if (length < 0 || length > length_) return false;
  for (const auto& layer : layers_) {
    if (layer.pool && layer.firstLive > firstNeededPage(layer, length)) return false;
  }
  return true;
}

void Session::truncate(int64_t length) {
  JITLLM_REQUIRE(length >= 0 && length <= length_, "cannot truncate a session of ", length_, " tokens to ", length);
  JITLLM_REQUIRE(canTruncate(length), "cannot rewind session ", id_, " to ", length,
                 " tokens: its sliding-window layers have freed the KV that would need");
  if (length < length_) rewinds_++;
  length_ = length;
}

void Session::resume(int64_t length) {
  JITLLM_REQUIRE(length_ == 0 && pageCount() == 0, "resume(): session ", id_, " is not new");
  JITLLM_REQUIRE(length >= 0 && length <= contextLimit_, "cannot resume ", length, " tokens in a session limited to ",
                 contextLimit_);
  for (auto& layer : layers_) {
    if (!layer.pool) continue;
    const size_t first = firstNeededPage(layer, length);
    layer.pages.assign(first, kNoPage);
    layer.addresses.assign(first, nullptr);
    layer.firstLive = first;
  }
  allocatePages(length);
  length_ = length;
}

KvSlot Session::slotFor(int layer, int64_t position) const {
  const LayerPages& l = layers_[size_t(layer)];
  const int64_t pageTokens = l.pool->layout().pageTokens;
  const size_t page = size_t(position / pageTokens);
  JITLLM_ASSERT(page < l.addresses.size() && page >= l.firstLive);
  return {l.addresses[page], int(position % pageTokens)};
}

int Session::shardsOf(int layer) const {
  int n = 0;
  while (n < kMaxShards && layers_[size_t(tableOf(layer, n))].pool) n++;
  return n;
}

size_t Session::pageCount() const {
  size_t n = 0;
  for (const auto& l : layers_) n += l.pages.size() - l.firstLive;
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

void Session::replaceLayer(int layer, KvPagePool* pool, std::vector<PageId>& pages, std::vector<uint8_t*>& addresses,
                           size_t firstLive, KvPagePool*& oldPool) noexcept {
  LayerPages& l = layers_[size_t(layer)];
  JITLLM_ASSERT(addresses.size() == pages.size() && firstLive <= pages.size() && (pool || pages.empty()));
  oldPool = l.pool;
  l.pool = pool;
  l.pages.swap(pages);
  l.addresses.swap(addresses);
  l.firstLive = firstLive;
}

}  // namespace jitllm::runtime
