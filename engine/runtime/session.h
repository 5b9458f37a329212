// One conversation's state in a model: how many tokens it has seen and, per layer, the page table
// of its KV cache.
//
// A session is created by Model::createSession with a context limit; feeding it more tokens than
// that is an Error(FAILED) saying so, raised before anything changes. Its pages come from the KV
// pool of the device each layer runs on and go back when the session is destroyed. A live
// migration moves a layer's pages to another pool (rebindLayer) between steps.
//
// Its page tables: one per model layer, and for a tensor-parallel block one per device of the
// block (shard), its KV heads split over them (kv_head_split.h). Table tableOf(layer, shard) holds
// that shard's pages; shard 0's table is the layer's index, so a layer on one device is table
// `layer`. A table without a pool is unused: it holds no pages and is skipped by everything below.
// Methods taking `layer` take a table index.
//
// A layer with a sliding window (gemma3's local layers) keeps only the pages its window can still
// reach: once the next token's window starts past a page, advance() frees it and its page-table
// entry becomes kNoPage / a null address. Page tables stay indexed by position / pageTokens; the
// live pages of a layer are [firstLivePage, layerPageTableSize). A rewind (truncate) back behind
// what was freed is refused.
//
// Ownership: owns its pages (returned to their pools on destruction); the Model (its pools and its
// SessionRegistry) must outlive it.
// Thread-safety: used by one thread at a time (the model's step loop).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "engine/kv/kv_page_pool.h"

namespace jitllm::runtime {

class Session;

// The first page a layer with sliding window `window` (0: none) still needs once a session is
// `length` tokens long: the one holding the next token's window start.
size_t firstPageInWindow(int64_t window, int64_t pageTokens, int64_t length);

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

// Keeps per-session copies of KV (a migration's or a tensor-parallel switch's, each with a
// `rewinds` field) in step with the live sessions: a copy whose session ended goes (after
// `release(copy)`), a new session gets one (`start(copy)`), and a copy whose session rewound
// since it was made starts over (`restart(copy)`: positions it copied may have been rewritten).
template <class Copy, class Release, class Start, class Restart>
void reconcileCopies(std::map<uint64_t, Copy>& copies, const SessionRegistry& sessions, Release release, Start start,
                     Restart restart);

class Session final {
 public:
  // `registry` may be null (a session no migration will reach). A null pool is an unused table.
  // `layerWindows`, when given, holds each layer's sliding window in tokens (0: none).
  Session(uint64_t id, int64_t contextLimit, std::vector<KvPagePool*> layerPools, SessionRegistry* registry = nullptr,
          std::vector<int64_t> layerWindows = {});
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
  // Records that `tokens` more tokens now have their KV written; frees the pages sliding windows
  // have left behind.
  void advance(int64_t tokens);
  // Forgets tokens after `length` (keeps the pages), for rewinding a conversation. Error(FAILED)
  // when a sliding window would need pages already freed (canTruncate says so beforehand).
  void truncate(int64_t length);
  bool canTruncate(int64_t length) const;
  // A parked session coming back (HostKv): the session becomes `length` tokens long at once,
  // with the pages a session advanced to that length would hold allocated, for the caller to
  // fill. Only on a new session; Error(OVERLOADED) when a device has no room.
  void resume(int64_t length);

  // Devices a block can be split over at most (tensor parallelism), i.e. tables per layer.
  static constexpr int kMaxShards = 4;

  int layerCount() const { return layerCount_; }
  int tableCount() const { return int(layers_.size()); }
  int tableOf(int layer, int shard) const { return layer + layerCount_ * shard; }
  // Shards the layer's KV is split over now (tables in use).
  int shardsOf(int layer) const;
  int64_t layerWindow(int layer) const { return layers_[size_t(layer)].window; }
  // The device addresses of layer `layer`'s pages, in position order (null: freed, see above).
  const std::vector<uint8_t*>& pageAddresses(int layer) const { return layers_[size_t(layer)].addresses; }
  KvPagePool& layerPool(int layer) const { return *layers_[size_t(layer)].pool; }
  bool layerInUse(int layer) const { return layers_[size_t(layer)].pool != nullptr; }
  // Pages the layer holds (live ones).
  size_t layerPageCount(int layer) const { return layerPageTableSize(layer) - firstLivePage(layer); }
  size_t layerPageTableSize(int layer) const { return layers_[size_t(layer)].pages.size(); }
  size_t firstLivePage(int layer) const { return layers_[size_t(layer)].firstLive; }
  KvSlot slotFor(int layer, int64_t position) const;
  size_t pageCount() const;  // over all layers

  // Replaces layer `layer`'s pages with `pages` of `pool` (as many, holding the same KV; their
  // `addresses` from pool.address(); kNoPage and null where the layer's are freed). On return
  // `pages` and `addresses` hold the old ones: the caller gives the pages back to their pool (a
  // migration does so after its pause) and frees the vectors when it likes. O(1): no page is
  // touched, no memory allocated or freed.
  void rebindLayer(int layer, KvPagePool& pool, std::vector<PageId>& pages, std::vector<uint8_t*>& addresses) noexcept;
  // The same for a table whose pages change shape (a tensor-parallel switch re-lays a layer's KV
  // over other devices): `pool` may be null (the table falls unused; `pages` must then be empty)
  // and the count may differ; `firstLive` is the first entry that is not kNoPage. On return
  // `pages` and `addresses` hold the old ones, for the caller to give back to `oldPool`.
  void replaceLayer(int layer, KvPagePool* pool, std::vector<PageId>& pages, std::vector<uint8_t*>& addresses,
                    size_t firstLive, KvPagePool*& oldPool) noexcept;

 private:
  struct LayerPages {
    KvPagePool* pool = nullptr;
    std::vector<PageId> pages;
    std::vector<uint8_t*> addresses;
    int64_t window = 0;
    size_t firstLive = 0;  // pages before it are freed
  };
  static size_t firstNeededPage(const LayerPages& layer, int64_t length) {
    return firstPageInWindow(layer.window, layer.pool->layout().pageTokens, length);
  }
  void allocatePages(int64_t length);

  uint64_t id_;
  int64_t contextLimit_;
  int64_t length_ = 0;
  uint64_t rewinds_ = 0;
  int layerCount_ = 0;
  std::vector<LayerPages> layers_;  // tables: the layers', then shard 1's of every layer, ...
  SessionRegistry* registry_;
};

template <class Copy, class Release, class Start, class Restart>
void reconcileCopies(std::map<uint64_t, Copy>& copies, const SessionRegistry& sessions, Release release, Start start,
                     Restart restart) {
  for (auto it = copies.begin(); it != copies.end();) {
    if (sessions.find(it->first) == nullptr) {
      release(it->second);
      it = copies.erase(it);
    } else {
      ++it;
    }
  }
  for (Session* s : sessions.all()) {
    auto [it, fresh] = copies.try_emplace(s->id());
    Copy& c = it->second;
    if (fresh) {
      start(c);
      c.rewinds = s->rewinds();
    } else if (c.rewinds != s->rewinds()) {
      restart(c);
      c.rewinds = s->rewinds();
    }
  }
}

}  // namespace jitllm::runtime
