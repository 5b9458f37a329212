// One conversation's state in a model: how many tokens it has seen and, per layer, the page table
// of its KV cache.
//
// A session is created by Model::createSession with a context limit; feeding it more tokens than
// that is an Error(FAILED) saying so, raised before anything changes. Its pages come from the KV
// pool of the device each layer runs on and go back when the session is destroyed.
//
// Ownership: owns its pages (returned to their pools on destruction); the Model (and its pools)
// must outlive it.
// Thread-safety: used by one thread at a time (the model's step loop).
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/runtime/kv_page_pool.h"

namespace jitllm::runtime {

class Session final {
 public:
  Session(uint64_t id, int64_t contextLimit, std::vector<KvPagePool*> layerPools);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  uint64_t id() const { return id_; }
  int64_t length() const { return length_; }          // tokens whose KV is cached
  int64_t contextLimit() const { return contextLimit_; }

  // Makes room for `tokens` more tokens in every layer (allocating pages as needed); throws
  // Error(FAILED) past the context limit, Error(OVERLOADED) when a device has no memory.
  void reserve(int64_t tokens);
  // Records that `tokens` more tokens now have their KV written.
  void advance(int64_t tokens);
  // Forgets tokens after `length` (keeps the pages), for rewinding a conversation.
  void truncate(int64_t length);

  // The device addresses of layer `layer`'s pages, in position order.
  const std::vector<uint8_t*>& pageAddresses(int layer) const { return layers_[size_t(layer)].addresses; }
  KvSlot slotFor(int layer, int64_t position) const;
  size_t pageCount() const;  // over all layers

 private:
  struct LayerPages {
    KvPagePool* pool = nullptr;
    std::vector<PageId> pages;
    std::vector<uint8_t*> addresses;
  };

  uint64_t id_;
  int64_t contextLimit_;
  int64_t length_ = 0;
  std::vector<LayerPages> layers_;
};

}  // namespace jitllm::runtime
