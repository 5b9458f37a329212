// The migrations of one resident model: the requests (checked when they are made), the pins that
// keep units where they are, the one migration running, and where a paged-out model lived.
//
// A ModelHost owns one. Its worker prepares a slice of the running migration between steps
// (service()) and commits it at a token boundary, so the replies keep streaming and stand still
// only for the commit (live_migration.h, tensor_parallel_switch.h). One migration per model at a
// time: a request while one is pending or running is refused. The requester hears of a commit
// only once ps shows the new placement (publish(), then announce()), so nobody plans from a
// placement that has already changed.
//
// Ownership: borrows the model and the EventHub (both outlive it); owns the running migration and
// the committed one whose source memory goes back after the next step.
// Thread-safety: request(), unpin(), busy() and published() may be called from any thread (an
// internal mutex; callers may hold their own lock around them, never the other way round). Every
// other method is for the model's worker thread only.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "daemon/server/event_hub.h"
#include "daemon/server/migration_ticket.h"
#include "daemon/server/serving_metrics.h"
#include "engine/runtime/model.h"
#include "kernels/device.h"

namespace jitllm::server {

class ModelMigrations final {
 public:
  ModelMigrations(std::string modelName, runtime::Model& model, EventHub& events, ServingMetrics* metrics);
  ~ModelMigrations();
  ModelMigrations(const ModelMigrations&) = delete;
  ModelMigrations& operator=(const ModelMigrations&) = delete;

  // Queues a move of a range of units to request.target, or a change of split. Checked at once:
  // the range (Error(FAILED) saying the syntax), pins (a unit pinned to another device is refused
  // unless request.force), and that no migration of this model is pending or running.
  std::shared_ptr<MigrationTicket> request(MigrationRequest request);
  // Removes the pins of a range; pins of units outside it stay.
  void unpin(const std::string& layers);
  // A migration is requested, running, or committed but not yet published.
  bool busy() const;

  // What ps shows of them, as of the worker's last publish().
  struct Published {
    std::vector<std::string> pins;  // per unit: device id or ""
    std::string migration;          // the one in progress, one line; "" when none
    bool migrating = false;         // busy()
    bool pagedOut = false;          // see ModelSnapshot::pagedOut
    std::vector<std::string> home;
  };
  Published published() const;

  // Worker thread only, in the order of an iteration:
  // The devices a pending request names, which this iteration must lock to start it.
  void addRequestedDevices(std::vector<Device*>& devices) const;
  // Starts the pending migration (when `locks` cover its devices), prepares one slice of the
  // running one, or commits it. A failure fails the ticket and leaves the model where it was.
  void service(const DeviceLocks& locks);
  // After the step that followed a commit: the migration's source memory goes back.
  void afterStep();
  // The device the running migration has staged `unit` on ("" if none).
  std::string stagedOn(int unit) const;
  // Takes the running migration's line for published(); a commit becomes visible here.
  void publish();
  // After publish(): a committed migration's ticket succeeds.
  void announce();
  // `lost` went away: a running or pending migration that names it or moves a unit off it fails
  // with DISCONNECTED (`cause` says why), pins to it go, and paged-out units whose home it was
  // are at home on `fallback`.
  void deviceLost(const Device& lost, const Device& fallback, const std::string& cause);
  // The model is being unloaded: a pending or running migration fails with `why`.
  void shutdown(const Error& why);

 private:
  struct Running;
  // service()'s steps: the pending migration started (false: none, or not under these locks);
  // the running one a slice further (true: it committed this time); a commit's pins, metrics and
  // events.
  bool start(const DeviceLocks& locks);
  bool advance();
  void committed(Running& m);
  void ended();  // the running migration is over (done, failed or never started)

  const std::string name_;
  runtime::Model& model_;
  EventHub& events_;
  ServingMetrics* const metrics_;

  mutable std::mutex mutex_;
  std::vector<std::string> pins_;             // per unit: device id or ""
  std::shared_ptr<MigrationTicket> pending_;  // requested, not yet started by the worker
  bool busy_ = false;                         // pending or running, or committed but not yet published
  std::string publishedLine_;                 // Published::migration
  bool pagedOut_ = false;
  std::vector<std::string> home_;

  std::unique_ptr<Running> running_;  // worker thread only
  // A committed migration whose source pages and weights go back after the next step, so the
  // streams do not wait for that (worker thread only).
  std::unique_ptr<Running> retiring_;
  // A commit publish() has not shown yet: its ticket succeeds, and busy_ clears, at the publish.
  std::pair<std::shared_ptr<MigrationTicket>, runtime::MigrationStats> committed_;
};

}  // namespace jitllm::server
