// A resident model and the thread that runs it: continuous batching of every generation on it.
//
// Three parts: this façade (what is constant: the model, its name and options, its chat
// template), the ModelMailbox (the only state callers and the worker share: queued requests and
// the published state, one kj::MutexGuarded), and the ModelWorker (the worker thread's own state:
// the step loop, the idle sessions, the device locks). The worker's loop (model_worker.h) runs one
// StepLoop step of every runnable job per iteration - prompt chunks and decode tokens together;
// because every kernel computes a token's row independently of the rest of the batch, each
// session gets exactly the tokens it would get alone. Jobs join and leave between iterations; a
// cancelled job's session (and so its KV pages) is dropped at the next one.
//
// Migrations run on the same worker (model_migrations.h): between iterations it prepares one
// slice of the migration in progress and, once prepared, commits it before the next step, so the
// replies keep streaming and stand still only for the commit. Pins (per unit) keep units where
// they are.
//
// Idle sessions: a reply that finished keeps its session (and KV) as an idle session, up to
// `idleSessions` per model, least recently used dropped first. A later request of the same user and
// context limit whose prompt starts with the tokens of one resumes it: only the rest of the prompt
// is computed (a chat client resends the whole conversation each turn). Under memory pressure an
// idle session's KV is parked in host RAM (parkIdleSessions) and comes back, bitwise, when it is
// resumed; when a device runs out of KV pages, idle sessions there give theirs up first.
//
// Service tiers (service_tier.h): sequences run most urgent first, and when a more urgent reply
// finds no KV pages a less urgent one is preempted - its KV parked in host RAM, brought back
// before a later step when it fits, nothing recomputed (StepLoop::Options::onSuspend).
//
// Ownership: owns the Model and the worker thread; the devices and the EventHub are borrowed and
// must outlive it. Destruction (or shutdown()) fails waiting and running jobs and a pending
// migration with DISCONNECTED.
// Thread-safety: public methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "daemon/server/event_hub.h"
#include "daemon/server/generation_job.h"
#include "daemon/server/lost_devices.h"
#include "daemon/server/migration_ticket.h"
#include "daemon/server/model_mailbox.h"
#include "daemon/server/model_migrations.h"
#include "daemon/server/model_snapshot.h"
#include "daemon/server/model_worker.h"
#include "daemon/server/serving_metrics.h"
#include "engine/chat/model_chat_template.h"
#include "engine/runtime/model.h"
#include "engine/runtime/step_loop.h"

namespace jitllm::server {

struct ModelHostOptions {
  int64_t defaultContext = 4096;  // session limit when a request names none
  size_t maxSessions = 64;        // running + waiting jobs; more is OVERLOADED
  size_t maxQueuedTokens = 64;    // per job, before it is throttled (see GenerationJob)
  // Called on the worker when a step failed with DISCONNECTED: the daemon checks which device
  // stopped answering and calls deviceLost(). May be empty.
  std::function<void(const std::string& model)> deviceFault;
  // Finished replies' sessions kept for a follow-up to continue (see above); 0: none kept.
  size_t idleSessions = 0;
  // Where generations, migrations and paging are counted (borrowed; may be null: not counted).
  ServingMetrics* metrics = nullptr;
  // The tiers' targets: goodput is counted against them, and interactive TPOT bounds a step while
  // an interactive reply decodes (setTiers() changes them on a config reload).
  TierConfig tiers;
  // Set on a replica (DaemonCore::replicate): the model it copies, whose requests it shares.
  std::string replicaOf;
};

class ModelHost final {
 public:
  ModelHost(std::string name, std::string path, std::unique_ptr<runtime::Model> model, ModelHostOptions options,
            EventHub& events);
  ~ModelHost();
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const runtime::Model& model() const { return *model_; }
  const ModelHostOptions& options() const { return options_; }
  const runtime::ChatTemplate& chatTemplate() const { return chatTemplate_; }
  int64_t loadedUnixMs() const { return loadedUnixMs_; }

  // Queues a job. Error(OVERLOADED) when maxSessions are busy - unless a less urgent reply runs,
  // which then gives way (preempted, its KV parked; up to twice maxSessions in all) -,
  // Error(DISCONNECTED) after shutdown(). The prompt is checked against the context when the worker admits it.
  // `perUserLimit`: at most this many sessions of the job's owner may run or wait at once
  // (max_sessions_per_uid; admins: no limit), else Error(OVERLOADED) saying so.
  void submit(std::shared_ptr<GenerationJob> job, size_t perUserLimit = SIZE_MAX);
  // Ends one session (cancel semantics); false when no job has that session id.
  bool cancelSession(uint64_t sessionId, uint32_t requesterUid, bool admin);

  // Starts moving a range of units to request.target (see migration_ticket.h for waiting on it).
  // Checked here, at once: the range (Error(FAILED) saying the syntax), pins (a unit pinned to
  // another device is refused unless request.force), and that no migration of this model is
  // running. Error(DISCONNECTED) after shutdown().
  std::shared_ptr<MigrationTicket> migrate(MigrationRequest request);
  // Moves the KV of every idle session held in device memory to host RAM (the device pages go
  // back to their pools); `reason` goes into the event. Returns at once; the worker does it
  // before its next step.
  void parkIdleSessions(const std::string& reason);
  // Removes the pins of a range; pins of units outside it stay.
  void unpin(const std::string& layers);
  // New tier targets (a config reload); the worker takes them before its next step.
  void setTiers(const TierConfig& tiers);

  // `lost` went away (unplugged, driver reset). Before its next step the worker ends the sessions
  // that hold KV on it with DISCONNECTED naming the device, fails a migration to or from it, and
  // binds the units that ran there again on `fallback` from the file's weights. Sessions with no
  // KV there (the device ran only token_embd or output) carry on. Returns at once; `done` (may be
  // empty) runs on the worker once the model is re-placed.
  void deviceLost(Device& lost, Device& fallback, const std::string& why, std::function<void()> done = {});

  ModelSnapshot snapshot() const;
  // Blocks until the worker has made the model's kernels ready on its devices (its first act, see
  // Model::prepareKernels) and returns how many it made; rethrows the error that stopped it.
  size_t waitUntilPrepared();
  size_t jobCount() const;
  // Stops accepting jobs; running ones fail with DISCONNECTED; joins the worker.
  void shutdown();
  // Waits until no job is running or queued, or `timeout` passes; true when idle.
  bool waitIdle(std::chrono::milliseconds timeout);

 private:
  void wake() { mailbox_.poke(); }

  const std::string name_;
  const std::string path_;
  std::unique_ptr<runtime::Model> model_;
  const ModelHostOptions options_;
  EventHub& events_;
  const runtime::ChatTemplate chatTemplate_;
  const int64_t loadedUnixMs_;
  mutable ModelMailbox mailbox_;  // snapshot() marks what it reads as wanted
  // Requests, pins, the running migration (its own lock; taken inside the mailbox's, never around it).
  std::unique_ptr<ModelMigrations> migrations_;
  LostDevices lostDevices_;  // deviceLost() requests, until the worker has re-placed the model
  std::unique_ptr<ModelWorker> worker_;
  std::thread thread_;
};

}  // namespace jitllm::server
