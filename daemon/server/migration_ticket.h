// A migration requested of a ModelHost, as its requester sees it: the request, then (once the
// model's worker has committed or given up) the outcome.
//
// The worker runs the migration itself (live_migration.h) between steps; the requester - an RPC
// call, a test, later the scheduler - waits for the outcome or walks away. Dropping a waiting
// RPC call cancels a migration still preparing (cancel()); one that has committed stays.
//
// Ownership: shared by the requester and the ModelHost's worker.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/runtime/live_migration.h"

namespace jitllm::server {

struct MigrationRequest {
  std::string layers;  // runtime::parseUnitRange syntax; "" = every unit
  Device* target = nullptr;
  bool precopy = true;
  bool force = false;     // also move units pinned elsewhere (their pins follow them)
  bool pinAfter = false;  // pin the whole range to the target once it is there
  std::string reason;     // why (the scheduler's policy says), shown in its events
  bool pageOut = false;   // the scheduler pages the model out: once committed it counts as not resident
  // Not empty: a tensor-parallel switch of the range's blocks to these devices (split[0], which
  // keeps the hidden state, is then `target` too) instead of a move.
  std::vector<Device*> split;
  bool partialSums = false;  // of the split (runtime::TensorParallelOptions)
};

struct MigrationResult {
  uint64_t id = 0;
  std::string model;
  std::string firstName, lastName;  // the range asked for
  std::string to;
  bool committed = false;
  runtime::MigrationStats stats;
};

class MigrationTicket final {
 public:
  MigrationTicket(MigrationResult identity, MigrationRequest request)
      : request_(std::move(request)), result_(std::move(identity)) {}

  const MigrationRequest& request() const { return request_; }
  uint64_t id() const { return result_.id; }

  // Asks the worker to abort the migration if it has not committed yet.
  void cancel();
  bool cancelled() const;

  bool done() const;
  // The outcome so far: identity always; stats and committed once done.
  MigrationResult result() const;
  std::optional<Error> error() const;
  // `waker` runs once when the ticket is done (at once, on this thread, if it already is).
  void setWaker(std::function<void()> waker);
  // Blocks until done or `timeout`; true when done.
  bool wait(std::chrono::milliseconds timeout) const;

  // The worker's side.
  void succeed(const runtime::MigrationStats& stats);
  void fail(const Error& error);

 private:
  void finish(std::unique_lock<std::mutex>& lock);  // marks done, unlocks, wakes

  const MigrationRequest request_;
  mutable std::mutex mutex_;
  mutable std::condition_variable doneChanged_;
  MigrationResult result_;
  std::optional<Error> error_;
  std::function<void()> waker_;
  bool cancelled_ = false;
  bool done_ = false;
};

}  // namespace jitllm::server
