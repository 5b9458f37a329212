#include "engine/kv/kv_page_pool.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::runtime {

KvPagePool::KvPagePool(Device& device, KvLayout layout) : device_(device), layout_(layout) {
  JITLLM_REQUIRE(layout.pageTokens > 0 && layout.kvHeads > 0 && layout.headDim > 0, "KV page layout is empty");
}

KvPagePool::~KvPagePool() = default;

PageId KvPagePool::allocate() {
  std::lock_guard lock(mutex_);
  if (!withFreePages_.empty()) {
    const size_t slot = *withFreePages_.begin();
    Chunk& c = chunks_[slot];
    const PageId page = c.freePages.back();
    c.freePages.pop_back();
    if (c.freePages.empty()) withFreePages_.erase(withFreePages_.begin());
    inUse_++;
    return page;
  }
  // No free page: take a chunk slot (a given-back one first, so ids stay dense) and fill it.
  size_t slot = 0;
  while (slot < chunks_.size() && chunks_[slot].buffer) slot++;
  if (slot == chunks_.size()) chunks_.emplace_back();
  Chunk& c = chunks_[slot];
  c.buffer = device_.allocate(layout_.pageBytes() * kPagesPerChunk);  // may throw OVERLOADED
  c.freePages.clear();
  for (size_t i = kPagesPerChunk; i-- > 1;) c.freePages.push_back(PageId(slot * kPagesPerChunk + i));
  withFreePages_.insert(slot);
  inUse_++;
  return PageId(slot * kPagesPerChunk);
}

void KvPagePool::free(PageId page) {
  std::lock_guard lock(mutex_);
  const size_t slot = page / kPagesPerChunk;
  JITLLM_ASSERT(slot < chunks_.size() && chunks_[slot].buffer);
  Chunk& c = chunks_[slot];
  c.freePages.push_back(page);
  withFreePages_.insert(slot);
  inUse_--;
  if (c.freePages.size() == kPagesPerChunk) {
    c.buffer.reset();  // nothing in it is used: the memory goes back to the device
    c.freePages.clear();
    withFreePages_.erase(slot);
  }
}

uint8_t* KvPagePool::address(PageId page) const {
  std::lock_guard lock(mutex_);
  const size_t slot = page / kPagesPerChunk;
  JITLLM_ASSERT(slot < chunks_.size() && chunks_[slot].buffer);
  return chunks_[slot].buffer->data() + (page % kPagesPerChunk) * layout_.pageBytes();
}

size_t KvPagePool::pagesInUse() const {
  std::lock_guard lock(mutex_);
  return inUse_;
}

size_t KvPagePool::pagesReserved() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& c : chunks_) n += c.buffer ? kPagesPerChunk : 0;
  return n;
}

}  // namespace jitllm::runtime
