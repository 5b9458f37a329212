// What the callers of a ModelHost and its worker thread share, and nothing else: the requests
// waiting for the worker (jobs, cancels, parks, new tier targets, the stop), what the worker
// publishes for ps, the scheduler and /metrics (one Published value, swapped whole), and the
// counters callers wait on. Everything else of a model's serving state belongs to the worker
// alone (model_worker.h) or is constant.
//
// One kj::MutexGuarded holds it all, so every access takes the lock by construction; a waiter's
// condition is looked at again whenever another thread lets the lock go, so a change made under
// it wakes whoever waits for it without a separate notification.
//
// Ownership: owns the queued jobs' references (weak for the per-user count).
// Thread-safety: every method from any thread.
#pragma once

#include <kj/mutex.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/server/generation_job.h"
#include "daemon/server/model_snapshot.h"
#include "daemon/server/service_tier.h"
#include "daemon/server/tier_goodput.h"

namespace jitllm::server {

// What the worker last published of the model's serving state (ModelHost::snapshot() adds the
// constant parts and the migrations').
struct PublishedState {
  std::vector<SessionSnapshot> sessions;  // running or waiting for a step
  std::vector<SessionSnapshot> idle;      // kept after their reply
  std::vector<std::pair<std::string, size_t>> kvBytes, idleKvBytes;
  std::vector<KvPoolSnapshot> pools;
  size_t parkedBytes = 0;
  std::vector<UnitSnapshot> units;
};

class ModelMailbox final {
 public:
  struct Limits {
    size_t maxSessions = 64;    // running + waiting; more is OVERLOADED (see ModelHost::submit)
    size_t perUser = SIZE_MAX;  // the job owner's sessions (max_sessions_per_uid)
  };
  explicit ModelMailbox(const std::string& modelName, const TierConfig& tiers);

  // --- callers ---
  // Queues a job under `limits`, or throws as ModelHost::submit says.
  void submit(std::shared_ptr<GenerationJob> job, const Limits& limits);
  // Asks the worker to end session `id`; true when the published sessions have it. Error(FAILED)
  // when it is another user's and the requester is no admin.
  bool cancel(uint64_t id, uint32_t requesterUid, bool admin);
  void park(const std::string& reason);
  void setTiers(const TierConfig& tiers);
  // Something happened the worker should look at (a throttle lifted, a migration requested).
  void poke();
  // Something ps shows changed without a step (a pin): the worker publishes at its next iteration.
  void republish();
  // Stops accepting jobs; false when it already had.
  bool stop();
  bool stopping() const;
  // Runs `fn` under the lock unless stopping (Error(DISCONNECTED) naming the model then): what
  // must not slip in after the worker's last look (a migration request).
  void unlessStopping(const std::function<void()>& fn);

  // The last published state; marks it wanted, so the worker publishes again after its next step.
  PublishedState published();
  size_t jobCount() const;
  int64_t lastActiveMs() const;
  std::vector<TierGoodput> goodput() const;
  // Blocks until the worker has made the kernels ready; rethrows its error; the modules made.
  size_t waitUntilPrepared();
  bool prepared() const;
  // Until no job runs or waits, or `timeout`; true when idle.
  bool waitIdle(std::chrono::milliseconds timeout);

  // --- the worker ---
  // What the callers asked for since the last take.
  struct Inbox {
    std::vector<std::shared_ptr<GenerationJob>> arrivals;
    std::set<uint64_t> cancels;
    std::vector<std::string> parks;
    std::optional<TierConfig> tiers;  // changed
    bool stopping = false;
  };
  // Waits until `ready()` (read under the lock), a poke or anything in the inbox (at most
  // `timeout` when set), then takes the inbox; `active` jobs count as the model's from then on.
  Inbox take(const std::function<bool()>& ready, std::optional<std::chrono::milliseconds> timeout, size_t active);
  void setPrepared(std::optional<Error> error, size_t made);
  // After a step: the state ps shows (when the worker built one: see ModelWorker for when), the
  // jobs it still holds, and whether a session ran.
  void publish(std::optional<PublishedState> state, size_t active, bool ran);
  // A reader took the published state since it was built: the worker builds it again.
  bool publishWanted() const;
  // A reply ended normally: goodput counts it; whether it met its tier's targets.
  void recordGoodput(ServiceTier tier, bool met, std::chrono::steady_clock::time_point now);
  TierTargets targetsOf(ServiceTier tier) const;
  TierConfig tiers() const;
  // The jobs that never reached the worker, when it stops (they fail with `gone`).
  std::vector<std::shared_ptr<GenerationJob>> drainOnStop(size_t active);

 private:
  struct State {
    std::vector<std::shared_ptr<GenerationJob>> incoming;
    std::set<uint64_t> cancels;
    std::vector<std::string> parks;
    // Every job submitted and not yet ended, for the per-user limit.
    std::vector<std::weak_ptr<GenerationJob>> jobs;
    TierConfig tiers;
    bool tiersChanged = false;
    bool stopping = false;
    bool pokes = false;
    size_t active = 0;  // jobs the worker holds
    bool prepared = false;
    std::optional<Error> prepareError;
    size_t kernelsMade = 0;
    PublishedState published;
    bool publishWanted = false;  // a reader took `published` since it was built
    int64_t lastActiveMs = 0;    // steady-clock ms of the last step that ran a session
    TierGoodputCounter goodput;
  };

  const std::string name_;
  kj::MutexGuarded<State> state_;
};

}  // namespace jitllm::server
