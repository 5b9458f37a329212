// Moving a range of a running model's units to another device without stopping its replies.
//
// A migration has two phases (docs/migration.md):
//  - prepare, in slices between the model's steps (prepareStep): bind each unit's weights on the
//    target (copied there, or viewed in place on the CPU), run its ops once there so the kernels
//    are compiled before they matter, and - with pre-copy - copy every session's sealed KV pages
//    (pages every position of which is already written; only a rewind changes them again) into
//    pages of the target's pool, re-copying pages sealed since.
//  - commit, at a token boundary (the step loop stands still meanwhile): give each session its
//    remaining pages on the target - the open tail pages and those sealed since their pre-copy,
//    gathered from the source into one contiguous host buffer and scattered on the target in one
//    transfer - then flip the units to their staged bindings, return the source pages and free the
//    source weights. Nothing is recomputed: the KV moves as it is, so every later step computes
//    exactly what it would have computed on the target all along.
// Everything that can fail (target memory, a vanished device, a cancel) fails before the flip;
// the model then runs where it was, and destroying the migration returns every target page and
// buffer it took. The commit does work proportional to the sessions and moving layers, plus the
// open pages' bytes - not to the context length - so with pre-copy its pause stays flat. Units already on the target
// are left alone.
//
// Ownership: borrows the Model (which must outlive it) and the target Device.
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

struct MigrationOptions {
  UnitRange units;
  Device* target = nullptr;
  bool precopy = true;
  // KV bytes one prepareStep copies at most, so a step of the streaming replies is delayed by
  // about a millisecond's copying, not the whole cache's.
  size_t stepBytes = size_t(16) << 20;
  // Units one prepareStep stages: at least one, and more while the slice has taken less than this
  // (0: exactly one). Staging on the CPU is a view and costs microseconds, a GPU upload of a
  // block milliseconds: a budget keeps the reply's step delay bounded either way while a
  // many-unit migration prepares in a few steps rather than one step per unit.
  double stageBudgetMs = 0;
};

struct MigrationStats {
  int units = 0;              // units that move (not already on the target)
  std::string from;           // their source devices, "cpu:0" or "cpu:0,vulkan:0"
  size_t weightBytes = 0;     // weights bound on the target
  size_t bytesPrecopied = 0;  // KV copied during prepare
  size_t bytesInPause = 0;    // KV copied during commit
  double prepareMs = 0;       // construction to the start of commit
  double pauseMs = 0;         // the commit itself
  int sessions = 0;           // sessions whose KV moved
  int recomputedTokens = 0;   // always 0; reported because it is the guarantee
};

class LiveMigration final {
 public:
  // Error(FAILED) for a range outside the model or a missing target.
  LiveMigration(Model& model, MigrationOptions options);
  // Not committed: aborts - returns the target pages and frees the staged weights.
  ~LiveMigration();
  LiveMigration(const LiveMigration&) = delete;
  LiveMigration& operator=(const LiveMigration&) = delete;

  // One bounded slice of preparation; true when what is left fits the pause (every unit staged
  // and every sealed page copied). Throws Error on failure (OVERLOADED: target memory; others:
  // the target failed); the migration is then dead and only to be destroyed.
  bool prepareStep();
  // Prepares whatever is left, then commits. All or nothing: on an Error nothing has moved.
  // The source pages and weights are not freed here - returning them costs time that grows with
  // the context (chunks going back to the device) - but by releaseSource(), which the step loop
  // calls after its next step, or by the destructor.
  void commit();
  void releaseSource() noexcept;

  bool committed() const { return committed_; }
  const MigrationOptions& options() const { return options_; }
  const MigrationStats& stats() const { return stats_; }
  bool staged(int unit) const { return staged_.count(unit) != 0; }
  // One line for ps: "blk.0-output cpu:0 -> cpu:1: 3/9 units staged, 1.2 MB KV pre-copied".
  std::string describe() const;

 private:
  // One session's pages on the target for the moving layers, in the order of movingLayers_.
  struct SessionCopy {
    uint64_t rewinds = 0;                          // the session's rewinds() when its pages were copied
    std::vector<std::vector<PageId>> pages;        // per moving layer: target pages, in position order
    std::vector<std::vector<uint8_t*>> addresses;  // their addresses
    std::vector<int64_t> valid;                    // per moving layer: leading positions whose KV is on the target
    std::vector<size_t> freedBefore;               // per moving layer: target entries before it are kNoPage
  };

  void reconcileSessions();
  void stageUnit(int unit);  // binds the unit's weights on the target and warms its kernels
  // Copies sealed pages up to `budget` bytes; true when none is left.
  bool precopy(size_t budget);
  void releaseTargetPages();
  void freeTargetPages(SessionCopy& copy);  // a session's target pages, back to the pool
  void warmTail();
  // The pause's copy: every session's pages of the moving layers on the target, with what is not
  // valid there yet copied over. May throw (OVERLOADED: target pages); nothing has flipped then.
  void copyRemainingKv(const std::vector<Session*>& sessions);
  void releaseSpares() noexcept;
  // Appends a target page to the copy of `layer` (the index of movingLayers_), or a kNoPage entry
  // where the source's page table has a freed one. May throw OVERLOADED.
  void addTargetPage(SessionCopy& c, size_t layer, const Session& s);
  // Frees the target pages of a copy behind the source's freed ones (its sliding windows moved on).
  void dropFreedTargetPages(SessionCopy& c, size_t layer, const Session& s);

  Model& model_;
  UnitPlacement& placement_;  // model_'s units
  MigrationOptions options_;
  KvPagePool* targetPool_ = nullptr;
  std::vector<int> movingUnits_;
  std::vector<int> movingLayers_;  // block indices among movingUnits_
  std::map<int, std::unique_ptr<BoundUnit>> staged_;
  std::map<uint64_t, SessionCopy> copies_;  // by session id (ids are never reused)
  std::vector<uint8_t> staging_;            // host buffer the pause gathers open pages into
  struct Span {                             // one contiguous copy between host-memory devices, in the pause
    Device* source;
    const uint8_t* from;
    uint8_t* to;
    size_t bytes;
  };
  std::vector<Span> spans_;
  std::vector<PageId> spares_;  // touched target pages for pages a step opens just before the pause
  // What the commit replaced, until releaseSource().
  std::vector<std::unique_ptr<BoundUnit>> retiredUnits_;
  std::vector<std::pair<KvPagePool*, std::vector<PageId>>> retiredPages_;
  std::chrono::steady_clock::time_point started_;
  MigrationStats stats_;
  bool committed_ = false;
};

}  // namespace jitllm::runtime
