#include "daemon/runtime/kv_page_pool.h"

#include <algorithm>

#include "kernels/error.h"

namespace jitllm::runtime {

KvPagePool::KvPagePool(Device& device, KvLayout layout) : device_(device), layout_(layout) {
  JITLLM_REQUIRE(layout.pageTokens > 0 && layout.kvHeads > 0 && layout.headDim > 0, "KV page layout is empty");
}

KvPagePool::~KvPagePool() = default;

PageId KvPagePool::allocate() {
  std::lock_guard lock(mutex_);
  if (freePages_.empty()) {
    const size_t pageBytes = layout_.pageBytes();
    std::unique_ptr<DeviceBuffer> chunk = device_.allocate(pageBytes * kPagesPerChunk);  // may throw OVERLOADED
    for (size_t i = 0; i < kPagesPerChunk; i++) {
      freePages_.push_back(PageId(pageAddress_.size()));
      pageAddress_.push_back(chunk->data() + i * pageBytes);
    }
    chunks_.push_back(std::move(chunk));
    // Hand out low ids first, so page order follows allocation order within a chunk.
    std::reverse(freePages_.end() - kPagesPerChunk, freePages_.end());
  }
  PageId page = freePages_.back();
  freePages_.pop_back();
  return page;
}

void KvPagePool::free(PageId page) {
  std::lock_guard lock(mutex_);
  JITLLM_ASSERT(page < pageAddress_.size());
  freePages_.push_back(page);
}

uint8_t* KvPagePool::address(PageId page) const {
  std::lock_guard lock(mutex_);
  JITLLM_ASSERT(page < pageAddress_.size());
  return pageAddress_[page];
}

size_t KvPagePool::pagesInUse() const {
  std::lock_guard lock(mutex_);
  return pageAddress_.size() - freePages_.size();
}

size_t KvPagePool::pagesReserved() const {
  std::lock_guard lock(mutex_);
  return pageAddress_.size();
}

}  // namespace jitllm::runtime
