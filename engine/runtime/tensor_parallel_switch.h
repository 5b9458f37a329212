// Changing how many devices a running model's blocks are split over (tensor parallelism), mid-reply.
//
// The same two phases as a LiveMigration (live_migration.h), with the same guarantees:
//  - prepare, in slices between the model's steps (prepareStep): bind each block's shards on their
//    devices - its heads' rows of q, k, v, its rows of gate and up, its columns of the output and
//    down projections (UnitBinder::bindSplit), or the whole block on one device when switching to one -
//    and run them once so their kernels are made (the standing executors); then re-lay every
//    session's sealed KV pages by heads into pages of the new shards' pools (one gather per old
//    shard and one scatter per new shard for a run of pages), re-laying pages sealed since.
//  - commit, at a token boundary: re-lay the rest (open tail pages, pages sealed since), flip the
//    blocks to their new bindings and the sessions to their new page tables, and hand the old ones
//    to releaseSource(). Nothing is recomputed: K and V move as they are, split by heads.
// Everything that can fail fails before the flip; destroying an uncommitted switch returns every
// page and buffer it took, and the model runs as it was. Blocks already split as asked are left alone.
//
// Numerics: a split block computes one device's bits, so a reply keeps every bit across switches;
// with partialSums (model.h) only within rounding.
//
// Ownership: borrows the Model (which must outlive it) and the devices.
// Thread-safety: every method on the model's step-loop thread, between forward() calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/model.h"
#include "engine/runtime/unit_range.h"

namespace jitllm::runtime {

struct TensorParallelOptions {
  UnitRange units;                      // the blocks among these switch (the embedding and head stay)
  std::vector<Device*> devices;         // the new split, the hidden state's device first; one: no split
  bool precopy = true;                  // re-lay sealed pages while preparing (a pause that stays flat)
  bool partialSums = false;             // split the output and down projections too (model.h)
  size_t stepBytes = size_t(16) << 20;  // KV bytes one prepareStep re-lays at most
};

struct TensorParallelStats {
  int units = 0;              // blocks that switch
  std::string from;           // "cpu:0" or "cpu:0+cpu:1" (the first block's split before)
  std::string to;             // the same after
  size_t weightBytes = 0;     // weights bound for the new split
  size_t bytesPrecopied = 0;  // KV re-laid during prepare
  size_t bytesInPause = 0;    // KV re-laid during commit
  double prepareMs = 0;
  double pauseMs = 0;
  int sessions = 0;
  int recomputedTokens = 0;  // always 0
};

class TensorParallelSwitch final {
 public:
  // Error(FAILED) for a range with no block, no devices, more than Session::kMaxShards, a device
  // twice, or heads / FFN rows that do not split over that many.
  TensorParallelSwitch(Model& model, TensorParallelOptions options);
  ~TensorParallelSwitch();
  TensorParallelSwitch(const TensorParallelSwitch&) = delete;
  TensorParallelSwitch& operator=(const TensorParallelSwitch&) = delete;

  // One bounded slice of preparation; true when what is left fits the pause. Throws Error on
  // failure (OVERLOADED: no memory on a device); the switch is then only to be destroyed.
  bool prepareStep();
  // Prepares what is left, then commits. All or nothing.
  void commit();
  // Frees the old bindings and pages (the step loop calls it after its next step).
  void releaseSource() noexcept;

  bool committed() const { return committed_; }
  const TensorParallelOptions& options() const { return options_; }
  const TensorParallelStats& stats() const { return stats_; }
  // "blk.0-blk.15 cpu:0 -> cpu:0+cpu:1: 3/16 blocks staged, 1.2 MB KV re-laid".
  std::string describe() const;

 private:
  // A session's KV for the switching layers in the new split.
  struct SessionCopy {
    uint64_t rewinds = 0;
    // [switching layer][new shard]: pages in position order (kNoPage before the live ones).
    std::vector<std::vector<std::vector<PageId>>> pages;
    std::vector<std::vector<std::vector<uint8_t*>>> addresses;
    std::vector<int64_t> valid;  // per switching layer: leading positions re-laid
  };

  void reconcileSessions();
  bool precopy(size_t budget);
  // Makes the copy's page tables as long as the session's, kNoPage where its pages are freed
  // (freeing copies of pages freed since). May throw OVERLOADED.
  void growPages(SessionCopy& c, size_t layer, const Session& s);
  // Pages [first, end) of switching layer `layer` (an index of units_) of a session, to re-lay.
  struct Run {
    const Session* session;
    SessionCopy* copy;
    size_t layer;
    size_t first, end;
  };
  // Re-lays the runs' pages into their copies: one gather per source device and one scatter per
  // target device for all of them, the heads re-laid in host memory between. Returns the bytes.
  size_t relay(const std::vector<Run>& runs);
  void freePages(SessionCopy& c);
  KvPagePool& newPool(int shard) const;

  Model& model_;
  UnitPlacement& placement_;  // model_'s units
  TensorParallelOptions options_;
  std::vector<int> units_;  // switching blocks (unit numbers)
  std::map<int, std::unique_ptr<BoundUnit>> staged_;
  std::map<uint64_t, SessionCopy> copies_;
  std::vector<std::unique_ptr<BoundUnit>> retiredUnits_;
  std::vector<std::pair<KvPagePool*, std::vector<PageId>>> retiredPages_;
  // Host staging of a relay, per device and page size, kept from one relay to the next.
  struct Staging {
    std::vector<uint8_t> bytes;
    std::vector<uint8_t*> pages;  // device addresses, in the order of `bytes`
  };
  std::map<std::pair<Device*, size_t>, Staging> gathered_, scattered_;
  std::chrono::steady_clock::time_point started_;
  TensorParallelStats stats_;
  bool committed_ = false;
};

}  // namespace jitllm::runtime
