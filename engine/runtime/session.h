// One conversation's state in a model: how many tokens it has seen and, per layer, the page table
// of its KV cache.
//
// A session is created by Model::createSession with a context limit; feeding it more tokens than
// that is an Error(FAILED) saying so, raised before anything changes. Its pages come from the KV
// pool of the device each layer runs on and go back when the session is destroyed. A live
// migration moves a layer's pages to another pool (rebindLayer) between steps.
//
// Ownership: owns its pages (returned to their pools on destruction); the Model (its pools and its
// SessionRegistry) must outlive it.
// Thread-safety: used by one thread at a time (the model's step loop).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv/kv_page_pool.h"

namespace jitllm::runtime {

class Session;

// The live sessions of one model, for the work that must reach all of them (a migration moves
// every session's pages). Sessions add and remove themselves. Step-loop thread only.
class SessionRegistry final {
 public:
  const std::vector<Session*>& all() const { return sessions_; }
  Session* find(uint64_t id) const;

 private:
  friend class Session;
  void add(Session* s) { sessions_.push_back(s); }
  void remove(Session* s);
  std::vector<Session*> sessions_;
};

class Session final {
 public:
  // `registry` may be null (a session no migration will reach).
  Session(uint64_t id, int64_t contextLimit, std::vector<KvPagePool*> layerPools, SessionRegistry* registry = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  uint64_t id() const { return id_; }
  int64_t length() const { return length_; }  // tokens whose KV is cached
  int64_t contextLimit() const { return contextLimit_; }
  // How many times truncate() moved the length back: KV below the old length may since have been
  // rewritten, so a copy of "sealed" pages made before is stale when this changed.
  uint64_t rewinds() const { return rewinds_; }

  // Makes room for `tokens` more tokens in every layer (allocating pages as needed); throws
  // Error(FAILED) past the context limit, Error(OVERLOADED) when a device has no memory.
  void reserve(int64_t tokens);
  // Records that `tokens` more tokens now have their KV written.
  void advance(int64_t tokens);
  // Forgets tokens after `length` (keeps the pages), for rewinding a conversation.
  void truncate(int64_t length);

  int layerCount() const { return int(layers_.size()); }
  // The device addresses of layer `layer`'s pages, in position order.
  const std::vector<uint8_t*>& pageAddresses(int layer) const { return layers_[size_t(layer)].addresses; }
  KvPagePool& layerPool(int layer) const { return *layers_[size_t(layer)].pool; }
  size_t layerPageCount(int layer) const { return layers_[size_t(layer)].pages.size(); }
  KvSlot slotFor(int layer, int64_t position) const;
  size_t pageCount() const;  // over all layers

  // Replaces layer `layer`'s pages with `pages` of `pool` (as many, holding the same KV; their
  // `addresses` from pool.address()). On return `pages` and `addresses` hold the old ones: the
  // caller gives the pages back to their pool (a migration does so after its pause) and frees
  // the vectors when it likes. O(1): no page is touched, no memory allocated or freed.
  void rebindLayer(int layer, KvPagePool& pool, std::vector<PageId>& pages, std::vector<uint8_t*>& addresses) noexcept;

 private:
  struct LayerPages {
    KvPagePool* pool = nullptr;
    std::vector<PageId> pages;
    std::vector<uint8_t*> addresses;
  };

  uint64_t id_;
  int64_t contextLimit_;
  int64_t length_ = 0;
  uint64_t rewinds_ = 0;
  std::vector<LayerPages> layers_;
  SessionRegistry* registry_;
};

}  // namespace jitllm::runtime
