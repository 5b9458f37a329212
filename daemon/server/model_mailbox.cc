#include "daemon/server/model_mailbox.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::server {

namespace {

int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

kj::Duration toKj(std::chrono::milliseconds ms) { return ms.count() * kj::MILLISECONDS; }

}  // namespace

ModelMailbox::ModelMailbox(const std::string& modelName, const TierConfig& tiers) : name_(modelName) {
  state_.lockExclusive()->tiers = tiers;
}

void ModelMailbox::submit(std::shared_ptr<GenerationJob> job, const Limits& limits) {
  auto s = state_.lockExclusive();
  if (s->stopping) JITLLM_FAIL(kDisconnected, "model '", name_, "' is being unloaded");
  const uint32_t uid = job->request().ownerUid;
  size_t mine = 0;
  bool lessUrgentRuns = false;
  std::erase_if(s->jobs, [&](const std::weak_ptr<GenerationJob>& w) {
    const auto j = w.lock();
    if (!j || j->ended()) return true;
    mine += j->request().ownerUid == uid;
    lessUrgentRuns = lessUrgentRuns || j->request().tier > job->request().tier;
    return false;
  });
  // At the limit a request still gets in when a less urgent reply runs: that one is preempted
  // to make room (its KV parked, worker side), up to twice the limit in all.
  const size_t busy = s->incoming.size() + s->active;
  const bool yields = s->tiers.scheduling && lessUrgentRuns && busy < 2 * limits.maxSessions;
  if (busy >= limits.maxSessions && !yields) {
    JITLLM_FAIL(kOverloaded, "model '", name_, "' already runs ", limits.maxSessions,
                " sessions (max_sessions); try again later");
  }
  if (mine >= limits.perUser) {
    JITLLM_FAIL(kOverloaded, "uid ", uid, " already runs ", mine, " sessions of '", name_,
                "' (max_sessions_per_uid); try again when one has finished");
  }
  s->jobs.push_back(job);
  s->incoming.push_back(std::move(job));
}

bool ModelMailbox::cancel(uint64_t id, uint32_t requesterUid, bool admin) {
  auto s = state_.lockExclusive();
  bool known = false;
  for (const auto* list : {&s->published.sessions, &s->published.idle}) {
    for (const auto& session : *list) {
      if (session.id != id) continue;
      JITLLM_REQUIRE(admin || session.ownerUid == requesterUid, "session ", id,
                     " belongs to another user; only its owner or an admin may cancel it");
      known = true;
    }
  }
  // The job itself is found by the worker; cancellation is a flag it sees at its next iteration.
  s->cancels.insert(id);
  return known;
}

void ModelMailbox::park(const std::string& reason) { state_.lockExclusive()->parks.push_back(reason); }

void ModelMailbox::setTiers(const TierConfig& tiers) {
  auto s = state_.lockExclusive();
  s->tiers = tiers;
  s->tiersChanged = true;
}

void ModelMailbox::poke() { state_.lockExclusive()->pokes = true; }

void ModelMailbox::republish() {
  auto s = state_.lockExclusive();
  s->publishWanted = true;
  s->pokes = true;
}

bool ModelMailbox::stop() {
  auto s = state_.lockExclusive();
  const bool was = s->stopping;
  s->stopping = true;
  return !was;
}

bool ModelMailbox::stopping() const { return state_.lockExclusive()->stopping; }

void ModelMailbox::unlessStopping(const std::function<void()>& fn) {
  auto s = state_.lockExclusive();
  if (s->stopping) JITLLM_FAIL(kDisconnected, "model '", name_, "' is being unloaded");
  fn();
  s->pokes = true;
}

PublishedState ModelMailbox::published() {
  auto s = state_.lockExclusive();
  s->publishWanted = true;
  return s->published;
}

size_t ModelMailbox::jobCount() const {
  auto s = state_.lockExclusive();
  return s->incoming.size() + s->active;
}

int64_t ModelMailbox::lastActiveMs() const { return state_.lockExclusive()->lastActiveMs; }

std::vector<TierGoodput> ModelMailbox::goodput() const {
  auto s = state_.lockExclusive();
  return s->goodput.snapshot(s->tiers, std::chrono::steady_clock::now());
}

size_t ModelMailbox::waitUntilPrepared() {
  auto s = state_.lockExclusive();
  s.wait([](const State& st) { return st.prepared; });
  if (s->prepareError) throw *s->prepareError;
  return s->kernelsMade;
}

bool ModelMailbox::prepared() const { return state_.lockExclusive()->prepared; }

bool ModelMailbox::waitIdle(std::chrono::milliseconds timeout) {
  auto s = state_.lockExclusive();
  auto idle = [](const State& st) { return st.incoming.empty() && st.active == 0; };
  s.wait(idle, toKj(timeout));
  return idle(*s);
}

ModelMailbox::Inbox ModelMailbox::take(const std::function<bool()>& ready,
                                       std::optional<std::chrono::milliseconds> timeout, size_t active) {
  auto s = state_.lockExclusive();
  // `ready` is looked at under the lock, possibly by the thread that lets it go: it reads only
  // what is safe from any thread (jobs' own locks).
  auto wake = [&](const State& st) {
    return st.pokes || st.stopping || st.tiersChanged || !st.incoming.empty() || !st.cancels.empty() ||
           !st.parks.empty() || ready();
  };
  if (!wake(*s)) s.wait(wake, timeout ? kj::Maybe<kj::Duration>(toKj(*timeout)) : nullptr);
  Inbox in;
  s->pokes = false;
  if (s->tiersChanged) in.tiers = s->tiers;
  s->tiersChanged = false;
  s->goodput.expire(std::chrono::steady_clock::now());  // at most a minute of met replies is kept
  in.arrivals.swap(s->incoming);
  in.cancels.swap(s->cancels);
  in.parks.swap(s->parks);
  in.stopping = s->stopping;
  s->active = active + in.arrivals.size();
  return in;
}

void ModelMailbox::setPrepared(std::optional<Error> error, size_t made) {
  auto s = state_.lockExclusive();
  s->prepared = true;
  s->prepareError = std::move(error);
  s->kernelsMade = made;
}

void ModelMailbox::publish(std::optional<PublishedState> state, size_t active, bool ran) {
  auto s = state_.lockExclusive();
  if (state) {
    s->published = std::move(*state);
    s->publishWanted = false;
  }
  if (ran) s->lastActiveMs = steadyMs();  // sessions ran (or wait) this iteration; idle ones do not count
  s->active = active;
}

bool ModelMailbox::publishWanted() const { return state_.lockExclusive()->publishWanted; }

void ModelMailbox::recordGoodput(ServiceTier tier, bool met, std::chrono::steady_clock::time_point now) {
  state_.lockExclusive()->goodput.record(tier, met, now);
}

TierTargets ModelMailbox::targetsOf(ServiceTier tier) const { return state_.lockExclusive()->tiers.targetsOf(tier); }

TierConfig ModelMailbox::tiers() const { return state_.lockExclusive()->tiers; }

std::vector<std::shared_ptr<GenerationJob>> ModelMailbox::drainOnStop(size_t active) {
  auto s = state_.lockExclusive();
  std::vector<std::shared_ptr<GenerationJob>> left;
  left.swap(s->incoming);
  s->active = active;
  s->published.sessions.clear();
  return left;
}

}  // namespace jitllm::server
