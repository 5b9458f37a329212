#include "daemon/server/model_host.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "daemon/server/reply_wakeups.h"
#include "engine/chat/stop_strings.h"
#include "engine/kv/host_kv.h"
#include "engine/runtime/unit_range.h"
#include "engine/tokenizer/streaming_detokenizer.h"

namespace jitllm::server {

using Clock = std::chrono::steady_clock;

namespace {

// `token`'s log-softmax in `logits`, and the `top` best tokens' (ties to the lower id, as greedy
// picks), computed in double so that the sum over a 100k vocabulary keeps its precision.
TokenLogprob tokenLogprob(int32_t token, std::span<const float> logits, int32_t top) {
  const float maxLogit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - maxLogit);
  const double logSum = double(maxLogit) + std::log(sum);
  TokenLogprob out;
  out.id = token;
  out.logprob = float(double(logits[size_t(token)]) - logSum);
  const size_t n = std::min(size_t(top), logits.size());
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); i++) ids[i] = int32_t(i);
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < n; i++) out.top.emplace_back(ids[i], float(double(logits[size_t(ids[i])]) - logSum));
  return out;
}

}  // namespace

// A job the worker has admitted: its sequence in the step loop, and what the daemon keeps beside
// it. The listener of its sequence. Worker thread only.
struct ModelHost::Active final : runtime::SequenceListener {
  ModelHost& host;
  std::shared_ptr<GenerationJob> job;
  runtime::Sequence* seq = nullptr;  // in the host's step loop until the iteration it ended in is over
  size_t reused = 0;                 // prompt tokens whose KV came from an idle session
  Clock::time_point started = Clock::now();
  bool keep = false;             // finished normally: its session stays as an idle session
  bool failureReported = false;  // its job has been failed already (a cancel, a lost device)
  // A reply that ended normally: the job hears of it after the step's publish (see finishActive).
  std::optional<GenerationStats> finished;
  // The session as the client knows it: its id (a session restored after a preemption gets a new
  // one inside the engine) and its context limit.
  uint64_t sessionId = 0;
  int64_t contextLimit = 0;
  // Preempted for a more urgent reply: its KV in host RAM until the worker can bring it back.
  std::unique_ptr<runtime::HostKv> parked;

  Active(ModelHost& h, std::shared_ptr<GenerationJob> j) : host(h), job(std::move(j)) {}
  runtime::Session& session() { return seq->session(); }
  bool done() const { return seq->ended(); }
  ReplyFacts facts() const;

  bool paused() override { return job->throttled(); }
  void generated(int32_t token, std::string_view text, std::span<const float> logits) override {
    const int32_t top = job->request().topLogprobs;
    job->push(token, std::string(text),
              top >= 0 && !logits.empty() ? std::optional(tokenLogprob(token, logits, top)) : std::nullopt);
  }
  void ended(std::string_view text) override {
    job->appendText(std::string(text));
    host.finishActive(*this);
  }
};

namespace {

// How long a step may take while an interactive reply decodes: its TPOT target, less a fifth for
// the step's own jitter (0: no target, no limit).
double urgentStepMs(const TierConfig& tiers) {
  return tiers.scheduling ? 0.8 * tiers.targetsOf(ServiceTier::kInteractive).tpotMs : 0.0;
}

}  // namespace

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
      migrations_(std::make_unique<ModelMigrations>(name_, *model_, events_, options_.metrics)),
      usedDevices_(model_->devices()),
      idle_(name_, *model_, options_.idleSessions, events_, options_.metrics),
      tiers_(options_.tiers) {
  // What ps shows is there before load() returns, not only after the worker's first iteration.
  publish({});
  worker_ = std::thread([this] { workerLoop(); });
}

ModelHost::~ModelHost() {
  shutdown();
  // Freeing the model's buffers takes turns with the workers of other models on its devices.
  const DeviceLocks locks(usedDevices_);
  loop_.reset();  // its sessions hold pages of the model's pools
  migrations_.reset();
  model_.reset();
}

void ModelHost::wake() {
  {
    std::lock_guard lock(mutex_);
    pokes_ = true;
  }
  changed_.notify_all();
}

void ModelHost::submit(std::shared_ptr<GenerationJob> job, size_t perUserLimit) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) JITLLM_FAIL(kDisconnected, "model '", name_, "' is being unloaded");
    const uint32_t uid = job->request().ownerUid;
    size_t mine = 0;
    bool lessUrgentRuns = false;
    std::erase_if(jobs_, [&](const std::weak_ptr<GenerationJob>& w) {
      const auto j = w.lock();
      if (!j || j->ended()) return true;
      mine += j->request().ownerUid == uid;
      lessUrgentRuns = lessUrgentRuns || j->request().tier > job->request().tier;
      return false;
    });
    // At the limit a request still gets in when a less urgent reply runs: that one is preempted
    // to make room (its KV parked, worker side), up to twice the limit in all.
    const size_t busy = incoming_.size() + activeCount_;
    const bool yields = tiers_.scheduling && lessUrgentRuns && busy < 2 * options_.maxSessions;
    if (busy >= options_.maxSessions && !yields) {
      JITLLM_FAIL(kOverloaded, "model '", name_, "' already runs ", options_.maxSessions,
                  " sessions (max_sessions); try again later");
    }
    if (mine >= perUserLimit) {
      JITLLM_FAIL(kOverloaded, "uid ", uid, " already runs ", mine, " sessions of '", name_,
                  "' (max_sessions_per_uid); try again when one has finished");
    }
    jobs_.push_back(job);
    job->setWorkerWaker([this] { wake(); });
    incoming_.push_back(std::move(job));
    pokes_ = true;
  }
  changed_.notify_all();
}

bool ModelHost::cancelSession(uint64_t sessionId, uint32_t requesterUid, bool admin) {
  std::lock_guard lock(mutex_);
  bool known = false;
  for (const auto* list : {&published_, &publishedIdle_}) {
    for (const auto& s : *list) {
      if (s.id != sessionId) continue;
      JITLLM_REQUIRE(admin || s.ownerUid == requesterUid, "session ", sessionId,
                     " belongs to another user; only its owner or an admin may cancel it");
      known = true;
    }
  }
  // The job itself is found through the worker's published table only; cancellation is a flag
  // the worker sees at its next iteration.
  cancelRequests_.insert(sessionId);
  pokes_ = true;
  changed_.notify_all();
  return known;
}

void ModelHost::parkIdleSessions(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    parkRequests_.push_back(reason);
    pokes_ = true;
  }
  changed_.notify_all();
}

std::shared_ptr<MigrationTicket> ModelHost::migrate(MigrationRequest request) {
  std::shared_ptr<MigrationTicket> ticket;
  {
    // Under the host's lock, so a request cannot slip in after the worker's shutdown failed the
    // pending one.
    std::lock_guard lock(mutex_);
    if (stopping_) JITLLM_FAIL(kDisconnected, "model '", name_, "' is being unloaded");
    ticket = migrations_->request(std::move(request));
    pokes_ = true;
  }
  changed_.notify_all();
  return ticket;
}

void ModelHost::unpin(const std::string& layers) {
  migrations_->unpin(layers);
  wake();
}

void ModelHost::deviceLost(Device& lost, Device& fallback, const std::string& why, std::function<void()> done) {
  // An unloaded model has nothing to re-place: add() refuses and `done` runs at once.
  if (!lostDevices_.add({&lost, &fallback, why, done})) {
    if (done) done();
    return;
  }
  wake();
}

void ModelHost::handleLostDevices(std::vector<std::unique_ptr<Active>>& active) {
  std::vector<LostDevices::Request> requests = lostDevices_.takeCovered(*locks_);
  if (lostDevices_.pending()) {
    std::lock_guard lock(mutex_);
    pokes_ = true;  // the rest came after this iteration took its locks: the next one handles them
  }
  for (LostDevices::Request& l : requests) {
    const std::string id = l.lost->info().id.str();
    const std::string cause = id + " went away (" + l.why + ")";
    migrations_->deviceLost(*l.lost, *l.fallback, cause);
    const UnitsOnDevice on = unitsOn(*model_, *l.lost);
    if (on.units.empty()) {
      lostDevices_.afterPublish(std::move(l.done));
      continue;
    }
    // Every session has KV in every block, so a block on the device takes all of them along; a
    // device that ran only token_embd or output holds no session state and they carry on.
    int ended = 0;
    if (on.holdsKv) {
      const Error gone(ErrorKind::kDisconnected, cause + " with the KV cache of " + on.names + " of '" + name_ +
                                                     "'; this session cannot continue without recomputing it: "
                                                     "start it again");
      for (auto& a : active) {
        if (a->done()) continue;
        a->job->fail(gone);
        a->failureReported = true;
        events_.emit({0, EventKind::kSession, "session.disconnected", name_, id, a->sessionId,
                      "after " + std::to_string(a->seq->generated()) + " tokens: " + cause,
                      a->job->request().ownerUid});
        loop_->fail(*a->seq, gone);
        ended++;
      }
      retire(active, nullptr);  // their pages go back now
      // Idle sessions lose theirs too, unless parked in host RAM: those come back on the new placement.
      idle_.dropIf([](const IdleSessions::Entry& i) { return i.session != nullptr; });
    }
    const std::string outcome = replaceUnits(*model_, name_, on, *l.lost, *l.fallback, cause);
    events_.emit({0, EventKind::kModel, "model.replaced", name_, l.fallback->info().id.str(), 0,
                  outcome + "; " + std::to_string(ended) + " session(s) ended with DISCONNECTED"});
    spdlog::warn("model '{}': {}; {} session(s) ended", name_, outcome, ended);
    lostDevices_.afterPublish(std::move(l.done));  // once ps shows it
  }
}

void ModelHost::publish(const std::vector<std::unique_ptr<Active>>& active) {
  std::vector<SessionSnapshot> sessions;
  size_t parkedBytes = 0;  // idle sessions' and preempted ones' KV in host RAM
  for (const auto& a : active) {
    const bool preempted = a->seq->suspended();
    sessions.push_back({a->sessionId, a->job->request().ownerUid, int64_t(a->seq->fed()), a->contextLimit,
                        preempted                  ? "preempted"
                        : a->job->throttled()      ? "waiting"
                        : a->seq->generated() == 0 ? "prefill"
                                                   : "decode",
                        a->job->request().tier});
    if (preempted && a->parked) parkedBytes += a->parked->bytes();
  }
  std::vector<SessionSnapshot> idle;
  for (const auto& i : idle_.entries()) {
    idle.push_back({i->id, i->ownerUid, int64_t(i->tokens.size()), i->contextLimit, i->session ? "idle" : "parked"});
    if (i->parked) parkedBytes += i->parked->bytes();
  }
  std::vector<SessionPages> pages;
  for (const auto& a : active) {
    if (!a->seq->suspended()) pages.push_back({&a->session(), a->sessionId, false});  // else its KV is in host RAM
  }
  for (const auto& i : idle_.entries()) {
    if (i->session) pages.push_back({i->session.get(), i->id, true});
  }
  PlacementSnapshot placement =
      snapshotPlacement(*model_, pages, [this](int unit) { return migrations_->stagedOn(unit); });
  std::vector<KvPoolSnapshot> pools;
  for (const runtime::KvPagePool* pool : model_->kvPools()) {
    pools.push_back({pool->device().info().id.str(), pool->pagesInUse(), pool->pagesReserved()});
  }
  migrations_->publish();
  std::lock_guard lock(mutex_);
  published_ = std::move(sessions);
  publishedIdle_ = std::move(idle);
  publishedIdleKv_ = std::move(placement.idleKvBytes);
  publishedParkedBytes_ = parkedBytes;
  publishedKv_ = std::move(placement.kvBytes);
  publishedPools_ = std::move(pools);
  publishedUnits_ = std::move(placement.units);
  if (!published_.empty()) {  // sessions ran (or wait) this iteration; idle ones do not count
    lastActiveMs_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  }
  activeCount_ = active.size();
}

ModelSnapshot ModelHost::snapshot() const {
  std::lock_guard lock(mutex_);
  ModelSnapshot s;
  s.name = name_;
  s.path = path_;
  s.sessions = published_;
  s.kvPools = publishedPools_;
  s.idle = publishedIdle_;
  s.kvBytesByDevice = publishedKv_;
  s.idleKvBytesByDevice = publishedIdleKv_;
  s.parkedKvBytes = publishedParkedBytes_;
  s.units = publishedUnits_;
  ModelMigrations::Published m = migrations_->published();
  for (size_t u = 0; u < s.units.size() && u < m.pins.size(); u++) s.units[u].pinned = std::move(m.pins[u]);
  s.migration = std::move(m.migration);
  s.lastActiveMs = lastActiveMs_;
  s.migrating = m.migrating;
  s.pagedOut = m.pagedOut;
  s.home = std::move(m.home);
  s.state = prepared_ ? "ready" : "preparing kernels";
  s.goodput = goodput_.snapshot(tiers_, Clock::now());
  return s;
}

void ModelHost::setTiers(const TierConfig& tiers) {
  std::lock_guard lock(mutex_);
  tiers_ = tiers;
  tiersChanged_ = true;
  pokes_ = true;
  changed_.notify_all();
}

size_t ModelHost::jobCount() const {
  std::lock_guard lock(mutex_);
  return incoming_.size() + activeCount_;
}

bool ModelHost::waitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return incoming_.empty() && activeCount_ == 0; });
}

void ModelHost::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    pokes_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ModelHost::admit(std::shared_ptr<GenerationJob> job, std::vector<std::unique_ptr<Active>>& active) {
  const GenerationRequest& r = job->request();
  try {
    JITLLM_ASSERT(r.promptPrepared());  // GenerationIntake validated and prepared it
    const int64_t limit = r.contextLimit > 0 ? r.contextLimit : options_.defaultContext;
    JITLLM_REQUIRE(limit <= model_->config().contextLength, "context size ", limit,
                   " is larger than the model's trained context of ", model_->config().contextLength);
    JITLLM_REQUIRE(int64_t(r.prompt.size()) < limit, "the prompt has ", r.prompt.size(),
                   " tokens and does not fit the context of ", limit, " (one more is needed for the reply)");
    for (int32_t id : r.prompt) {
      JITLLM_REQUIRE(id >= 0 && id < model_->config().vocabSize, "token id ", id, " is outside the vocabulary of ",
                     model_->config().vocabSize);
    }
    size_t reused = 0;
    std::unique_ptr<runtime::Session> session = idle_.take(r.ownerUid, r.prompt, limit, reused);
    if (!session) session = model_->createSession(limit);
    const uint64_t sessionId = session->id();
    auto a = std::make_unique<Active>(*this, job);
    a->reused = reused;
    runtime::SequenceRequest q;
    q.prompt = r.prompt;
    q.maxTokens = int32_t(r.maxTokens);
    q.sampling = r.sampling;
    q.stops = r.stops;
    q.stopAtEndOfGeneration = !r.ignoreEndOfGeneration;
    q.renderSpecialTokens = false;  // an EOS ends the reply; its text is not part of it
    q.keepLogits = r.topLogprobs >= 0;
    // Without tier scheduling every sequence is equal: first come, first served.
    q.priority = scheduleByTier_ ? int(r.tier) : int(ServiceTier::kStandard);
    a->sessionId = sessionId;
    a->contextLimit = limit;
    a->seq = &loop_->add(std::move(session), std::move(q), a.get(), reused);
    job->setSessionId(sessionId);
    events_.emit({0, EventKind::kSession, reused ? "session.resumed" : "session.started", name_, "", sessionId,
                  std::to_string(r.prompt.size()) + " prompt tokens" +
                      (reused ? " (" + std::to_string(reused) + " of them already in an idle session's KV)" : "") +
                      ", up to " + std::to_string(r.maxTokens) + " more (uid " + std::to_string(r.ownerUid) + ", " +
                      std::string(tierName(r.tier)) + ")",
                  r.ownerUid});
    active.push_back(std::move(a));
  } catch (const Error& e) {
    job->fail(e);
  }
}

ReplyFacts ModelHost::Active::facts() const {
  const GenerationRequest& r = job->request();
  return ReplyFacts{uint32_t(r.prompt.size()), sessionId, uint32_t(reused), r.tier, started};
}

void ModelHost::finishActive(Active& a) {
  const auto now = Clock::now();
  GenerationStats st;
  {
    std::lock_guard lock(mutex_);
    st = replyStats(*a.seq, a.facts(), tiers_.targetsOf(a.job->request().tier), now);
    goodput_.record(st.tier, st.metTargets, now);
  }
  // The client hears that its reply ended once ps no longer shows it running (after this step's
  // publish): a load or a request sent the moment a reply ends sees the model idle.
  a.finished = st;
  a.keep = options_.idleSessions > 0;
  events_.emit({0, EventKind::kSession, "session.finished", name_, "", st.sessionId,
                std::to_string(st.generatedTokens) + " tokens, " + std::to_string(int(st.tokensPerSecond)) +
                    " tok/s, " + std::string(tierName(st.tier)) + (st.metTargets ? " targets met" : " targets missed"),
                a.job->request().ownerUid});
}

void ModelHost::retire(std::vector<std::unique_ptr<Active>>& active,
                       std::vector<std::pair<std::shared_ptr<GenerationJob>, GenerationStats>>* finished) {
  for (std::unique_ptr<runtime::Sequence>& q : loop_->takeEnded()) {
    auto* a = static_cast<Active*>(q->listener());
    if (q->error() && !a->failureReported) a->job->fail(*q->error());
    if (options_.metrics) {
      // A reply that failed is counted with what it did before; one that ended, with its stats.
      const bool failed = !a->finished.has_value();
      options_.metrics->generationEnded(name_, failed ? replyStats(*q, a->facts(), {}, Clock::now()) : *a->finished,
                                        failed);
    }
    if (a->finished) {
      if (a->keep && q->session().length() > 0) {
        // The last sampled token was never fed: the KV holds the tokens before it.
        std::vector<int32_t> tokens(q->history().begin(), q->history().begin() + q->session().length());
        idle_.keep(a->job->request().ownerUid, q->releaseSession(), std::move(tokens));
      }
      if (finished) finished->emplace_back(a->job, *a->finished);
    }
    std::erase_if(active, [&](const auto& e) { return e.get() == a; });  // (the sequence, with its session, goes next)
  }
}

size_t ModelHost::runningCount(const std::vector<std::unique_ptr<Active>>& active) const {
  size_t running = 0;
  for (const auto& a : active) running += !a->done() && !a->seq->suspended();
  return running;
}

void ModelHost::yieldForRoom(std::vector<std::unique_ptr<Active>>& active) {
  for (size_t running = runningCount(active); running > options_.maxSessions; running--) {
    Active* victim = nullptr;
    for (auto& a : active) {
      if (a->done() || a->seq->suspended() || a->job->request().tier == ServiceTier::kInteractive) continue;
      if (!victim || a->job->request().tier >= victim->job->request().tier) victim = a.get();
    }
    if (!victim || !loop_->suspend(*victim->seq)) return;
  }
}

void ModelHost::resumePreempted(std::vector<std::unique_ptr<Active>>& active) {
  size_t running = runningCount(active);
  for (auto& a : active) {
    if (!a->parked || a->done() || !a->seq->suspended()) continue;
    if (running >= options_.maxSessions) return;  // no room: it waits for a reply to end
    const auto start = Clock::now();
    std::unique_ptr<runtime::Session> session;
    try {
      session = a->parked->restore(*model_);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kOverloaded) return;  // no room yet: the others wait too
      // Anything else (a device gone) ends this reply alone, with the reason.
      a->job->fail(e);
      a->failureReported = true;
      loop_->fail(*a->seq, e);
      a->parked.reset();
      continue;
    }
    loop_->resume(*a->seq, std::move(session));
    running++;
    if (options_.metrics) options_.metrics->kvPagedIn(name_);
    events_.emit({0, EventKind::kSession, "session.unparked", name_, "", a->sessionId,
                  "preempted reply back: " + humanBytes(a->parked->bytes()) + " of KV from host RAM in " +
                      std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - start).count()) +
                      " ms, nothing recomputed",
                  a->job->request().ownerUid});
    a->parked.reset();
  }
}

void ModelHost::prepareKernels() {
  std::optional<Error> failed;
  size_t made = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    made = model_->prepareKernels();
  } catch (const Error& e) {
    failed = e;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!failed) spdlog::info("model '{}': {} kernel modules made ready in {:.2f} s", name_, made, seconds);
  {
    std::lock_guard lock(mutex_);
    prepared_ = true;
    prepareError_ = failed;
    kernelsMade_ = made;
  }
  publish({});
  changed_.notify_all();
}

size_t ModelHost::waitUntilPrepared() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return prepared_; });
  if (prepareError_) throw *prepareError_;
  return kernelsMade_;
}

void ModelHost::workerLoop() {
  // Nothing runs before the model's kernels are ready: requests submitted meanwhile wait.
  prepareKernels();
  std::vector<std::unique_ptr<Active>> active;
  runtime::StepLoop::Options loopOptions;
  loopOptions.prefillChunk = kPrefillChunk;
  // Out of KV pages: idle sessions holding device memory give theirs up first.
  loopOptions.onOutOfMemory = [this] { return idle_.dropOneInDeviceMemory(); };
  // A more urgent reply found no KV pages: a less urgent one (batch first) gives up its own, parked
  // in host RAM until there is room again (resumePreempted); nothing is recomputed.
  loopOptions.onSuspend = [this](runtime::Sequence& victim, std::unique_ptr<runtime::Session> session) {
    auto* a = static_cast<Active*>(victim.listener());
    const auto start = Clock::now();
    a->parked = std::make_unique<runtime::HostKv>(*session);
    session.reset();  // its pages go back to their pools
    if (options_.metrics) options_.metrics->kvPagedOut(name_, 1);
    events_.emit({0, EventKind::kSession, "session.preempted", name_, "", a->sessionId,
                  std::string(tierName(a->job->request().tier)) +
                      " reply preempted for a more urgent one: " + humanBytes(a->parked->bytes()) + " of KV (" +
                      std::to_string(a->parked->length()) + " tokens) parked in host RAM in " +
                      std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - start).count()) + " ms",
                  a->job->request().ownerUid});
  };
  loopOptions.onStepError = [this](const Error& e) {
    spdlog::error("model '{}': step failed: {}", name_, e.what());
    // A device that stopped answering is the daemon's to find and re-place (deviceLost()).
    if (e.kind() == ErrorKind::kDisconnected && options_.deviceFault) options_.deviceFault(name_);
  };
  {
    std::lock_guard lock(mutex_);
    loopOptions.urgentStepMs = urgentStepMs(tiers_);
    scheduleByTier_ = tiers_.scheduling;
  }
  loop_ = std::make_unique<runtime::StepLoop>(*model_, loopOptions);
  for (;;) {
    std::vector<std::shared_ptr<GenerationJob>> arrivals;
    std::set<uint64_t> cancels;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      // A preempted reply is not runnable until its KV is back; while only such replies remain
      // (their room taken by other models), the worker looks again every few milliseconds.
      bool preempted = false;
      auto runnable = [&] {
        for (const auto& a : active) {
          if (a->seq->suspended()) {
            preempted = true;
          } else if (!a->job->throttled()) {
            return true;
          }
        }
        return false;
      };
      auto wake = [&] { return pokes_ || stopping_ || !incoming_.empty() || runnable() || migrations_->busy(); };
      if (!wake()) {
        if (preempted) {
          changed_.wait_for(lock, std::chrono::milliseconds(5), wake);
        } else {
          changed_.wait(lock, wake);
        }
      }
      pokes_ = false;
      if (tiersChanged_) {
        loop_->setUrgentStepMs(urgentStepMs(tiers_));
        scheduleByTier_ = tiers_.scheduling;
        tiersChanged_ = false;
      }
      goodput_.expire(Clock::now());  // at most a minute of met replies is remembered
      arrivals.swap(incoming_);
      cancels.swap(cancelRequests_);
      stopping = stopping_;
      activeCount_ = active.size() + arrivals.size();
    }
    if (stopping) {
      const Error gone(ErrorKind::kDisconnected, "model '" + name_ + "' was unloaded");
      for (auto& a : active) a->job->fail(gone);
      for (auto& j : arrivals) j->fail(gone);
      {
        // Their KV pages go back to pools on devices other models' workers may be driving.
        const DeviceLocks locks(usedDevices_);
        active.clear();
        loop_.reset();
        idle_.clear();
      }
      lostDevices_.close();  // nothing to re-place: their requesters hear so now
      std::lock_guard lock(mutex_);
      for (auto& j : incoming_) j->fail(gone);
      incoming_.clear();
      const Error unloaded(ErrorKind::kDisconnected, "model '" + name_ + "' was unloaded before the migration ended");
      migrations_->shutdown(unloaded);
      activeCount_ = 0;
      published_.clear();
      changed_.notify_all();
      return;
    }
    // This iteration's devices, held until its end: the model's, a migration's target, a lost device
    // and its replacement. Requests naming others wait for the next iteration.
    std::vector<Device*> touched = usedDevices_;
    {
      std::lock_guard lock(mutex_);
      migrations_->addRequestedDevices(touched);
      lostDevices_.addDevicesTo(touched);
    }
    const DeviceLocks locks(touched);
    locks_ = &locks;
    // Every reply this iteration feeds reaches the RPC thread in one wake-up, at its end.
    const ReplyWakeups::StepScope deliverTogether;
    for (Device* d : touched) {
      if (d && std::find(usedDevices_.begin(), usedDevices_.end(), d) == usedDevices_.end()) usedDevices_.push_back(d);
    }
    for (auto& j : arrivals) admit(std::move(j), active);
    handleLostDevices(active);
    std::vector<std::string> parks;
    {
      std::lock_guard lock(mutex_);
      parks.swap(parkRequests_);
    }
    for (const std::string& reason : parks) idle_.park(reason);
    idle_.dropIf([&](const IdleSessions::Entry& i) {
      if (!cancels.count(i.id)) return false;
      events_.emit(
          {0, EventKind::kSession, "session.cancelled", name_, "", i.id, "idle session forgotten", i.ownerUid});
      return true;
    });

    // Cancelled sessions end here; the loop gives them back after the step (their KV pages with them).
    for (auto& a : active) {
      if (a->done() || !(a->job->cancelled() || cancels.count(a->sessionId))) continue;
      const Error cancelled(ErrorKind::kFailed, "cancelled");
      a->job->fail(cancelled);
      a->failureReported = true;
      events_.emit({0, EventKind::kSession, "session.cancelled", name_, "", a->sessionId,
                    "after " + std::to_string(a->seq->generated()) + " tokens", a->job->request().ownerUid});
      loop_->fail(*a->seq, cancelled);
    }

    // No more than max_sessions replies run: past it (a more urgent one got in), the least urgent
    // give way; preempted replies come back, oldest first, while there is room and their pages fit.
    yieldForRoom(active);
    resumePreempted(active);

    // A migration prepares between steps and commits at this token boundary.
    migrations_->service(locks);

    // One step of every runnable sequence: prompt chunks and decode tokens together, each token
    // picked from candidates selected on the device, each job hearing of its token.
    loop_->step();

    // The step after a commit has run: the migration's source memory can go back now.
    migrations_->afterStep();

    // Retire ended sequences (their pages return to the pools, or stay as idle sessions) and
    // publish what ps shows.
    const bool hadSessions = !active.empty();
    std::vector<std::pair<std::shared_ptr<GenerationJob>, GenerationStats>> finished;
    retire(active, &finished);
    // A burst just ended: hand the heap's free memory back to the OS rather than keep the peak.
    if (hadSessions && active.empty()) ::malloc_trim(0);
    publish(active);
    for (auto& [job, stats] : finished) job->finish(stats);
    migrations_->announce();
    lostDevices_.runAfterPublish();
    locks_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace jitllm::server
