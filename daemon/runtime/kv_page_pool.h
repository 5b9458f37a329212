// Fixed-size KV pages carved out of one device's memory.
//
// A page holds KvLayout::pageTokens tokens of one layer's K and V. The pool grows by whole chunks
// of pages (one device allocation each) as sessions need them and keeps freed pages for reuse;
// when the device's budget is spent, allocate() throws Error(OVERLOADED) and nothing changes.
// Pages are the unit that later moves between devices.
//
// Ownership: owns its chunks (DeviceBuffers); the Device must outlive the pool.
// Thread-safety: all methods are safe to call from any thread (one mutex; page operations are
// rare next to the arithmetic on them).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/device.h"

namespace jitllm::runtime {

using PageId = uint32_t;

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
  size_t pagesReserved() const;  // in use + free, i.e. what the device gave us

 private:
  Device& device_;
  KvLayout layout_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<DeviceBuffer>> chunks_;
  std::vector<uint8_t*> pageAddress_;
  std::vector<PageId> freePages_;
};

}  // namespace jitllm::runtime
