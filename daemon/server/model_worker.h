// The thread that runs one resident model: everything of its serving state that only this thread
// touches - the step loop and its sequences, the idle sessions, the devices it locks each
// iteration - and the loop that drives them. What callers share with it is the ModelMailbox;
// what stays constant is the ModelHost's.
//
// Each iteration: take the mailbox (new jobs, cancels, parks, tier targets, the stop), lock the
// devices this iteration touches, admit the jobs, re-place units of lost devices, serve a slice of
// the migration in progress, run one step of every runnable sequence (StepLoop), retire the ended
// ones, and publish. The published state (ps, the scheduler, /metrics) is built only when it may
// have changed in a way a reader cares about - a session came, went or changed state, an idle
// session was kept or parked, a migration ran - when a reader took the last one, or at most every
// kPublishInterval for the counts that move every step (tokens, KV pages): a steady decode step
// builds nothing for nobody.
//
// Ownership: borrows the host's model, options, events, migrations, lost-device requests and
// mailbox, which outlive it.
// Thread-safety: run() on the worker thread; nothing else.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "daemon/server/event_hub.h"
#include "daemon/server/idle_sessions.h"
#include "daemon/server/lost_devices.h"
#include "daemon/server/model_mailbox.h"
#include "daemon/server/model_migrations.h"
#include "engine/runtime/model.h"
#include "engine/runtime/step_loop.h"

namespace jitllm::server {

struct ModelHostOptions;

class ModelWorker final {
 public:
  // The longest a reader's view of the counts that change every step may lag.
  static constexpr std::chrono::milliseconds kPublishInterval{100};

  ModelWorker(const std::string& name, runtime::Model& model, const ModelHostOptions& options, EventHub& events,
              ModelMigrations& migrations, LostDevices& lostDevices, ModelMailbox& mailbox);
  ~ModelWorker();
  ModelWorker(const ModelWorker&) = delete;
  ModelWorker& operator=(const ModelWorker&) = delete;

  // Makes the kernels ready, then serves until the mailbox says stop; fails what is left then.
  void run();
  // The state ps shows before the worker has run (the model's placement, no sessions).
  PublishedState initialState();

 private:
  struct Active;
  using Finished = std::vector<std::pair<std::shared_ptr<GenerationJob>, GenerationStats>>;

  void prepareKernels();
  runtime::StepLoop::Options loopOptions();
  // One iteration after the mailbox's inbox was taken; false when it said stop.
  bool iterate(ModelMailbox::Inbox inbox);
  void stop(std::vector<std::shared_ptr<GenerationJob>> arrivals);
  void admit(std::shared_ptr<GenerationJob> job);
  void applyCancels(const std::set<uint64_t>& cancels);
  void handleLostDevices();
  // A's reply ended normally (its sequence's stopReason): its stats, and whether it stays idle.
  void finishActive(Active& a);
  // Takes the ended sequences out of the step loop: a failure not reported yet fails its job, a
  // reply that finished keeps its session as an idle one, and their Active entries go;
  // `finished` (optional) gets the jobs that finished, told after the publish.
  void retire(Finished* finished);
  void yieldForRoom();
  void resumePreempted();
  size_t runningCount() const;
  // Whether the worker should wait for a job's reader rather than step: what take() waits on.
  std::function<bool()> readyToStep(bool& preempted) const;
  // The state to publish after this iteration, when it is due (see the top): `unitsMove` forces it.
  std::optional<PublishedState> stateIfDue(bool unitsMove);
  PublishedState buildState() const;
  // The sessions' states, in one cheap pass: what changes them makes a publish due.
  std::vector<std::pair<uint64_t, SessionState>> stateSignature() const;

  const std::string& name_;
  runtime::Model& model_;
  const ModelHostOptions& options_;
  EventHub& events_;
  ModelMigrations& migrations_;
  LostDevices& lostDevices_;
  ModelMailbox& mailbox_;

  std::unique_ptr<runtime::StepLoop> loop_;  // the running sequences
  std::vector<std::unique_ptr<Active>> active_;
  IdleSessions idle_;
  // Every device the model has used, and the locks on them held for one iteration: other models'
  // workers and loads share these devices and take turns.
  std::vector<Device*> usedDevices_;
  const DeviceLocks* locks_ = nullptr;
  bool scheduleByTier_ = true;  // the tiers' `scheduling` as last taken
  std::vector<std::pair<uint64_t, SessionState>> publishedSignature_;
  std::chrono::steady_clock::time_point publishedAt_{};
};

}  // namespace jitllm::server
