#include "daemon/server/model_host.h"

#include <spdlog/spdlog.h>

namespace jitllm::server {

ModelHost::ModelHost(std::string name, std::string path, std::unique_ptr<runtime::Model> model,
                     ModelHostOptions options, EventHub& events)
    : name_(std::move(name)),
      path_(std::move(path)),
      model_(std::move(model)),
      options_(options),
      events_(events),
      chatTemplate_(runtime::chatTemplateForModel(*model_, name_)),
      loadedUnixMs_(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count()),
      mailbox_(name_, options_.tiers),
      migrations_(std::make_unique<ModelMigrations>(name_, *model_, events_, options_.metrics)),
      worker_(std::make_unique<ModelWorker>(name_, *model_, options_, events_, *migrations_, lostDevices_, mailbox_)) {
  // What ps shows is there before load() returns, not only after the worker's first iteration.
  mailbox_.publish(worker_->initialState(), 0, false);
  thread_ = std::thread([this] { worker_->run(); });
}

ModelHost::~ModelHost() {
  shutdown();
  worker_.reset();  // its sessions hold pages of the model's pools (it takes the devices' locks)
  // Freeing the model's buffers takes turns with the workers of other models on its devices.
  const DeviceLocks locks(model_->devices());
  migrations_.reset();
  model_.reset();
}

void ModelHost::submit(std::shared_ptr<GenerationJob> job, size_t perUserLimit) {
  job->setWorkerWaker([this] { wake(); });
  mailbox_.submit(std::move(job), {options_.maxSessions, perUserLimit});
}

bool ModelHost::cancelSession(uint64_t sessionId, uint32_t requesterUid, bool admin) {
  return mailbox_.cancel(sessionId, requesterUid, admin);
}

void ModelHost::parkIdleSessions(const std::string& reason) { mailbox_.park(reason); }

std::shared_ptr<MigrationTicket> ModelHost::migrate(MigrationRequest request) {
  // Under the mailbox's lock, so a request cannot slip in after the worker's stop failed the
  // pending one.
  std::shared_ptr<MigrationTicket> ticket;
  mailbox_.unlessStopping([&] { ticket = migrations_->request(std::move(request)); });
  return ticket;
}

void ModelHost::unpin(const std::string& layers) {
  migrations_->unpin(layers);
  mailbox_.republish();
}

void ModelHost::setTiers(const TierConfig& tiers) { mailbox_.setTiers(tiers); }

void ModelHost::deviceLost(Device& lost, Device& fallback, const std::string& why, std::function<void()> done) {
  // An unloaded model has nothing to re-place: add() refuses and `done` runs at once.
  if (!lostDevices_.add({&lost, &fallback, why, done})) {
    if (done) done();
    return;
  }
  wake();
}

ModelSnapshot ModelHost::snapshot() const {
  PublishedState p = mailbox_.published();
  ModelSnapshot s;
  s.name = name_;
  s.path = path_;
  s.sessions = std::move(p.sessions);
  s.kvPools = std::move(p.pools);
  s.idle = std::move(p.idle);
  s.kvBytesByDevice = std::move(p.kvBytes);
  s.idleKvBytesByDevice = std::move(p.idleKvBytes);
  s.parkedKvBytes = p.parkedBytes;
  s.units = std::move(p.units);
  ModelMigrations::Published m = migrations_->published();
  for (size_t u = 0; u < s.units.size() && u < m.pins.size(); u++) s.units[u].pinned = std::move(m.pins[u]);
  s.migration = std::move(m.migration);
  s.lastActiveMs = mailbox_.lastActiveMs();
  s.migrating = m.migrating;
  s.pagedOut = m.pagedOut;
  s.home = std::move(m.home);
  s.state = mailbox_.prepared() ? ModelState::kReady : ModelState::kPreparingKernels;
  s.goodput = mailbox_.goodput();
  return s;
}

size_t ModelHost::waitUntilPrepared() { return mailbox_.waitUntilPrepared(); }

size_t ModelHost::jobCount() const { return mailbox_.jobCount(); }

bool ModelHost::waitIdle(std::chrono::milliseconds timeout) { return mailbox_.waitIdle(timeout); }

void ModelHost::shutdown() {
  mailbox_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace jitllm::server
