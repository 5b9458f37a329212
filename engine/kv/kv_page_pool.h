// Fixed-size KV pages carved out of one device's memory.
//
// A page holds KvLayout::pageTokens tokens of one layer's K and V. The pool grows by whole chunks
// of pages (one device allocation each) as sessions need them, hands out pages from the lowest
// chunk first, and gives a chunk back to the device as soon as none of its pages is in use - so
// a burst of sessions does not hold device memory after it ends. When the device's budget is
// spent, allocate() throws Error(OVERLOADED) and nothing changes. Pages are the unit that later
// moves between devices. A page id stays valid (and its address fixed) while the page is held.
//
// Ownership: owns its chunks (DeviceBuffers); the Device must outlive the pool.
// Thread-safety: all methods are safe to call from any thread (one mutex; page operations are
// rare next to the arithmetic on them).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/device.h"

namespace jitllm::runtime {

using PageId = uint32_t;
// A page-table entry whose page was freed (a sliding-window layer's pages behind its window).
constexpr PageId kNoPage = ~PageId{0};

class KvPagePool final {
 public:
  // Pages per device allocation: few enough that a small model does not reserve much, enough that
  // long contexts do not make thousands of allocations.
  static constexpr size_t kPagesPerChunk = 64;

  KvPagePool(Device& device, KvLayout layout);
  ~KvPagePool();
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  PageId allocate();
  void free(PageId page);
  uint8_t* address(PageId page) const;

  Device& device() const { return device_; }
  const KvLayout& layout() const { return layout_; }
  size_t pagesInUse() const;
  size_t pagesReserved() const;  // pages in chunks held from the device (in use or free)

 private:
  // Chunk c holds pages [c * kPagesPerChunk, (c + 1) * kPagesPerChunk).
  struct Chunk {
    std::unique_ptr<DeviceBuffer> buffer;  // null: given back to the device
    std::vector<PageId> freePages;         // of this chunk, lowest last (handed out first)
  };

  Device& device_;
  KvLayout layout_;
  mutable std::mutex mutex_;
  std::vector<Chunk> chunks_;
  std::set<size_t> withFreePages_;  // chunks holding a free page, lowest first: O(log n) allocation
  size_t inUse_ = 0;
};

}  // namespace jitllm::runtime
