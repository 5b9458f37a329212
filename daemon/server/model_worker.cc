#include "daemon/server/model_worker.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "daemon/server/model_host.h"
#include "daemon/server/reply_wakeups.h"
#include "engine/kv/host_kv.h"

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

// How long a step may take while an interactive reply decodes: its TPOT target, less a fifth for
// the step's own jitter (0: no target, no limit).
double urgentStepMs(const TierConfig& tiers) {
  return tiers.scheduling ? 0.8 * tiers.targetsOf(ServiceTier::kInteractive).tpotMs : 0.0;
}

// An idle session's KV is on its devices, or parked in host RAM.
SessionState idleState(const IdleSessions::Entry& i) { return i.session ? SessionState::kIdle : SessionState::kParked; }

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

// A job the worker has admitted: its sequence in the step loop, and what the daemon keeps beside
// it. The listener of its sequence.
struct ModelWorker::Active final : runtime::SequenceListener {
  ModelWorker& worker;
  std::shared_ptr<GenerationJob> job;
  runtime::Sequence* seq = nullptr;  // in the step loop until the iteration it ended in is over
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

  Active(ModelWorker& w, std::shared_ptr<GenerationJob> j) : worker(w), job(std::move(j)) {}
  runtime::Session& session() { return seq->session(); }
  bool done() const { return seq->ended(); }
  const GenerationRequest& request() const { return job->request(); }
  ReplyFacts facts() const {
    return ReplyFacts{uint32_t(request().prompt.size()), sessionId, uint32_t(reused), request().tier, started};
  }
  // Its state as ps shows it.
  SessionState state() const {
    return seq->suspended()        ? SessionState::kPreempted
           : job->throttled()      ? SessionState::kWaiting
           : seq->generated() == 0 ? SessionState::kPrefill
                                   : SessionState::kDecode;
  }

  bool paused() override { return job->throttled(); }
  void generated(int32_t token, std::string_view text, std::span<const float> logits) override {
    const int32_t top = request().topLogprobs;
    job->push(token, std::string(text),
              top >= 0 && !logits.empty() ? std::optional(tokenLogprob(token, logits, top)) : std::nullopt);
  }
  void ended(std::string_view text) override {
    job->appendText(std::string(text));
    worker.finishActive(*this);
  }
};

ModelWorker::ModelWorker(const std::string& name, runtime::Model& model, const ModelHostOptions& options,
                         EventHub& events, ModelMigrations& migrations, LostDevices& lostDevices, ModelMailbox& mailbox)
    : name_(name),
      model_(model),
      options_(options),
      events_(events),
      migrations_(migrations),
      lostDevices_(lostDevices),
      mailbox_(mailbox),
      idle_(name, model, options.idleSessions, events, options.metrics),
      usedDevices_(model.devices()) {}

ModelWorker::~ModelWorker() {
  // Freeing sessions' pages takes turns with the workers of other models on these devices.
  const DeviceLocks locks(usedDevices_);
  active_.clear();
  loop_.reset();
  idle_.clear();
}

PublishedState ModelWorker::initialState() { return buildState(); }

void ModelWorker::prepareKernels() {
  std::optional<Error> failed;
  size_t made = 0;
  const auto start = Clock::now();
  try {
    made = model_.prepareKernels();
  } catch (const Error& e) {
    failed = e;
  }
  if (!failed) spdlog::info("model '{}': {} kernel modules made ready in {:.2f} s", name_, made, msSince(start) / 1000);
  mailbox_.setPrepared(failed, made);
  mailbox_.publish(buildState(), 0, false);
}

runtime::StepLoop::Options ModelWorker::loopOptions() {
  runtime::StepLoop::Options o;
  // Out of KV pages: idle sessions holding device memory give theirs up first.
  o.onOutOfMemory = [this] { return idle_.dropOneInDeviceMemory(); };
  // A more urgent reply found no KV pages: a less urgent one (batch first) gives up its own, parked
  // in host RAM until there is room again (resumePreempted); nothing is recomputed.
  o.onSuspend = [this](runtime::Sequence& victim, std::unique_ptr<runtime::Session> session) {
    auto* a = static_cast<Active*>(victim.listener());
    const auto start = Clock::now();
    a->parked = std::make_unique<runtime::HostKv>(*session);
    session.reset();  // its pages go back to their pools
    if (options_.metrics) options_.metrics->kvPagedOut(name_, 1);
    events_.emit({0, EventKind::kSession, "session.preempted", name_, "", a->sessionId,
                  std::string(tierName(a->request().tier)) + " reply preempted for a more urgent one: " +
                      humanBytes(a->parked->bytes()) + " of KV (" + std::to_string(a->parked->length()) +
                      " tokens) parked in host RAM in " + std::to_string(msSince(start)) + " ms",
                  a->request().ownerUid});
  };
  o.onStepError = [this](const Error& e) {
    spdlog::error("model '{}': step failed: {}", name_, e.what());
    // A device that stopped answering is the daemon's to find and re-place (deviceLost()).
    if (e.kind() == ErrorKind::kDisconnected && options_.deviceFault) options_.deviceFault(name_);
  };
  return o;
}

std::function<bool()> ModelWorker::readyToStep(bool& preempted) const {
  // The jobs whose readers could let a step run: read through their own locks, from whichever
  // thread looks (see ModelMailbox::take).
  auto waiting = std::make_shared<std::vector<std::shared_ptr<GenerationJob>>>();
  bool runnable = false;
  preempted = false;
  for (const auto& a : active_) {
    if (a->seq->suspended()) {
      preempted = true;
    } else if (!a->job->throttled()) {
      runnable = true;
    } else {
      waiting->push_back(a->job);
    }
  }
  return [runnable, waiting] {
    return runnable || std::any_of(waiting->begin(), waiting->end(), [](const auto& j) { return !j->throttled(); });
  };
}

void ModelWorker::run() {
  // Nothing runs before the model's kernels are ready: requests submitted meanwhile wait.
  prepareKernels();
  runtime::StepLoop::Options options = loopOptions();
  const TierConfig tiers = mailbox_.tiers();
  options.urgentStepMs = urgentStepMs(tiers);
  scheduleByTier_ = tiers.scheduling;
  loop_ = std::make_unique<runtime::StepLoop>(model_, options);
  for (;;) {
    bool preempted = false;
    const std::function<bool()> ready = readyToStep(preempted);
    const bool migrating = migrations_.busy();
    // A preempted reply is not runnable until its KV is back; while only such replies remain
    // (their room taken by other models), the worker looks again every few milliseconds.
    auto inbox = mailbox_.take([&] { return migrating || ready(); },
                               preempted ? std::optional(std::chrono::milliseconds(5)) : std::nullopt, active_.size());
    if (!iterate(std::move(inbox))) return;
  }
}

bool ModelWorker::iterate(ModelMailbox::Inbox inbox) {
  if (inbox.tiers) {
    loop_->setUrgentStepMs(urgentStepMs(*inbox.tiers));
    scheduleByTier_ = inbox.tiers->scheduling;
  }
  if (inbox.stopping) {
    stop(std::move(inbox.arrivals));
    return false;
  }
  // This iteration's devices, held until its end: the model's, a migration's target, a lost device
  // and its replacement. Requests naming others wait for the next iteration.
  std::vector<Device*> touched = usedDevices_;
  migrations_.addRequestedDevices(touched);
  lostDevices_.addDevicesTo(touched);
  const DeviceLocks locks(touched);
  locks_ = &locks;
  // Every reply this iteration feeds reaches the event loop in one wake-up, at its end.
  const ReplyWakeups::StepScope deliverTogether;
  for (Device* d : touched) {
    if (d && std::find(usedDevices_.begin(), usedDevices_.end(), d) == usedDevices_.end()) usedDevices_.push_back(d);
  }
  // A migration or a lost device moves units: ps shows each step of it.
  const bool unitsMove = migrations_.busy() || lostDevices_.pending();
  for (auto& j : inbox.arrivals) admit(std::move(j));
  handleLostDevices();
  for (const std::string& reason : inbox.parks) idle_.park(reason);
  applyCancels(inbox.cancels);

  // No more than max_sessions replies run: past it (a more urgent one got in), the least urgent
  // give way; preempted replies come back, oldest first, while there is room and their pages fit.
  yieldForRoom();
  resumePreempted();
  // A migration prepares between steps and commits at this token boundary.
  migrations_.service(locks);
  // One step of every runnable sequence: prompt chunks and decode tokens together, each token
  // picked from candidates selected on the device, each job hearing of its token.
  loop_->step();
  // The step after a commit has run: the migration's source memory can go back now.
  migrations_.afterStep();

  // Retire ended sequences (their pages return to the pools, or stay as idle sessions) and
  // publish what ps shows; the jobs that finished hear of it after that.
  const bool hadSessions = !active_.empty();
  Finished finished;
  retire(&finished);
  // A burst just ended: hand the heap's free memory back to the OS rather than keep the peak.
  if (hadSessions && active_.empty()) ::malloc_trim(0);
  mailbox_.publish(stateIfDue(unitsMove), active_.size(), hadSessions);
  for (auto& [job, stats] : finished) job->finish(stats);
  migrations_.announce();
  lostDevices_.runAfterPublish();
  locks_ = nullptr;
  return true;
}

void ModelWorker::stop(std::vector<std::shared_ptr<GenerationJob>> arrivals) {
  const Error gone(ErrorKind::kDisconnected, "model '" + name_ + "' was unloaded");
  for (auto& a : active_) a->job->fail(gone);
  for (auto& j : arrivals) j->fail(gone);
  {
    // Their KV pages go back to pools on devices other models' workers may be driving.
    const DeviceLocks locks(usedDevices_);
    active_.clear();
    loop_.reset();
    idle_.clear();
  }
  lostDevices_.close();  // nothing to re-place: their requesters hear so now
  for (auto& j : mailbox_.drainOnStop(0)) j->fail(gone);
  migrations_.shutdown(
      Error(ErrorKind::kDisconnected, "model '" + name_ + "' was unloaded before the migration ended"));
}

void ModelWorker::admit(std::shared_ptr<GenerationJob> job) {
  const GenerationRequest& r = job->request();
  try {
    JITLLM_ASSERT(r.promptPrepared());  // GenerationIntake validated and prepared it
    const int64_t limit = r.contextLimit > 0 ? r.contextLimit : options_.defaultContext;
    JITLLM_REQUIRE(limit <= model_.config().contextLength, "context size ", limit,
                   " is larger than the model's trained context of ", model_.config().contextLength);
    JITLLM_REQUIRE(int64_t(r.prompt.size()) < limit, "the prompt has ", r.prompt.size(),
                   " tokens and does not fit the context of ", limit, " (one more is needed for the reply)");
    for (int32_t id : r.prompt) {
      JITLLM_REQUIRE(id >= 0 && id < model_.config().vocabSize, "token id ", id, " is outside the vocabulary of ",
                     model_.config().vocabSize);
    }
    size_t reused = 0;
    std::unique_ptr<runtime::Session> session = idle_.take(r.ownerUid, r.prompt, limit, reused);
    if (!session) session = model_.createSession(limit);
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
    active_.push_back(std::move(a));
  } catch (const Error& e) {
    job->fail(e);
  }
}

void ModelWorker::applyCancels(const std::set<uint64_t>& cancels) {
  idle_.dropIf([&](const IdleSessions::Entry& i) {
    if (!cancels.count(i.id)) return false;
    events_.emit({0, EventKind::kSession, "session.cancelled", name_, "", i.id, "idle session forgotten", i.ownerUid});
    return true;
  });
  // Cancelled sessions end here; the loop gives them back after the step (their KV pages with them).
  for (auto& a : active_) {
    if (a->done() || !(a->job->cancelled() || cancels.count(a->sessionId))) continue;
    const Error cancelled(ErrorKind::kFailed, "cancelled");
    a->job->fail(cancelled);
    a->failureReported = true;
    events_.emit({0, EventKind::kSession, "session.cancelled", name_, "", a->sessionId,
                  "after " + std::to_string(a->seq->generated()) + " tokens", a->request().ownerUid});
    loop_->fail(*a->seq, cancelled);
  }
}

void ModelWorker::handleLostDevices() {
  std::vector<LostDevices::Request> requests = lostDevices_.takeCovered(*locks_);
  if (lostDevices_.pending()) mailbox_.poke();  // the rest came after this iteration took its locks
  for (LostDevices::Request& l : requests) {
    const std::string id = l.lost->info().id.str();
    const std::string cause = id + " went away (" + l.why + ")";
    migrations_.deviceLost(*l.lost, *l.fallback, cause);
    const UnitsOnDevice on = unitsOn(model_, *l.lost);
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
      for (auto& a : active_) {
        if (a->done()) continue;
        a->job->fail(gone);
        a->failureReported = true;
        events_.emit({0, EventKind::kSession, "session.disconnected", name_, id, a->sessionId,
                      "after " + std::to_string(a->seq->generated()) + " tokens: " + cause, a->request().ownerUid});
        loop_->fail(*a->seq, gone);
        ended++;
      }
      retire(nullptr);  // their pages go back now
      // Idle sessions lose theirs too, unless parked in host RAM: those come back on the new placement.
      idle_.dropIf([](const IdleSessions::Entry& i) { return i.session != nullptr; });
    }
    const std::string outcome = replaceUnits(model_, name_, on, *l.lost, *l.fallback, cause);
    events_.emit({0, EventKind::kModel, "model.replaced", name_, l.fallback->info().id.str(), 0,
                  outcome + "; " + std::to_string(ended) + " session(s) ended with DISCONNECTED"});
    spdlog::warn("model '{}': {}; {} session(s) ended", name_, outcome, ended);
    lostDevices_.afterPublish(std::move(l.done));  // once ps shows it
  }
}

void ModelWorker::finishActive(Active& a) {
  const auto now = Clock::now();
  const GenerationStats st = replyStats(*a.seq, a.facts(), mailbox_.targetsOf(a.request().tier), now);
  mailbox_.recordGoodput(st.tier, st.metTargets, now);
  // The client hears that its reply ended once ps no longer shows it running (after this step's
  // publish): a load or a request sent the moment a reply ends sees the model idle.
  a.finished = st;
  a.keep = options_.idleSessions > 0;
  events_.emit({0, EventKind::kSession, "session.finished", name_, "", st.sessionId,
                std::to_string(st.generatedTokens) + " tokens, " + std::to_string(int(st.tokensPerSecond)) +
                    " tok/s, " + std::string(tierName(st.tier)) + (st.metTargets ? " targets met" : " targets missed"),
                a.request().ownerUid});
}

void ModelWorker::retire(Finished* finished) {
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
        idle_.keep(a->request().ownerUid, q->releaseSession(), std::move(tokens));
      }
      if (finished) finished->emplace_back(a->job, *a->finished);
    }
    std::erase_if(active_, [&](const auto& e) { return e.get() == a; });  // (the sequence, with its session, goes next)
  }
}

size_t ModelWorker::runningCount() const {
  size_t running = 0;
  for (const auto& a : active_) running += !a->done() && !a->seq->suspended();
  return running;
}

void ModelWorker::yieldForRoom() {
  for (size_t running = runningCount(); running > options_.maxSessions; running--) {
    Active* victim = nullptr;
    for (auto& a : active_) {
      if (a->done() || a->seq->suspended() || a->request().tier == ServiceTier::kInteractive) continue;
      if (!victim || a->request().tier >= victim->request().tier) victim = a.get();
    }
    if (!victim || !loop_->suspend(*victim->seq)) return;
  }
}

void ModelWorker::resumePreempted() {
  size_t running = runningCount();
  for (auto& a : active_) {
    if (!a->parked || a->done() || !a->seq->suspended()) continue;
    if (running >= options_.maxSessions) return;  // no room: it waits for a reply to end
    const auto start = Clock::now();
    std::unique_ptr<runtime::Session> session;
    try {
      session = a->parked->restore(model_);
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
                      std::to_string(msSince(start)) + " ms, nothing recomputed",
                  a->request().ownerUid});
    a->parked.reset();
  }
}

std::vector<std::pair<uint64_t, SessionState>> ModelWorker::stateSignature() const {
  std::vector<std::pair<uint64_t, SessionState>> signature;
  signature.reserve(active_.size() + idle_.entries().size());
  for (const auto& a : active_) signature.emplace_back(a->sessionId, a->state());
  for (const auto& i : idle_.entries()) signature.emplace_back(i->id, idleState(*i));
  return signature;
}

std::optional<PublishedState> ModelWorker::stateIfDue(bool unitsMove) {
  std::vector<std::pair<uint64_t, SessionState>> signature = stateSignature();
  const auto now = Clock::now();
  const bool due = unitsMove || signature != publishedSignature_ || mailbox_.publishWanted() ||
                   now - publishedAt_ >= kPublishInterval;
  if (!due) return std::nullopt;
  publishedSignature_ = std::move(signature);
  publishedAt_ = now;
  return buildState();
}

PublishedState ModelWorker::buildState() const {
  PublishedState p;
  for (const auto& a : active_) {
    p.sessions.push_back(
        {a->sessionId, a->request().ownerUid, int64_t(a->seq->fed()), a->contextLimit, a->state(), a->request().tier});
    if (a->seq->suspended() && a->parked) p.parkedBytes += a->parked->bytes();  // preempted: KV in host RAM
  }
  for (const auto& i : idle_.entries()) {
    p.idle.push_back({i->id, i->ownerUid, int64_t(i->tokens.size()), i->contextLimit, idleState(*i)});
    if (i->parked) p.parkedBytes += i->parked->bytes();
  }
  std::vector<SessionPages> pages;
  for (const auto& a : active_) {
    if (!a->seq->suspended()) pages.push_back({&a->session(), a->sessionId, false});  // else its KV is in host RAM
  }
  for (const auto& i : idle_.entries()) {
    if (i->session) pages.push_back({i->session.get(), i->id, true});
  }
  PlacementSnapshot placement =
      snapshotPlacement(model_, pages, [this](int unit) { return migrations_.stagedOn(unit); });
  for (const runtime::KvPagePool* pool : model_.kvPools()) {
    p.pools.push_back({pool->device().info().id.str(), pool->pagesInUse(), pool->pagesReserved()});
  }
  migrations_.publish();
  p.kvBytes = std::move(placement.kvBytes);
  p.idleKvBytes = std::move(placement.idleKvBytes);
  p.units = std::move(placement.units);
  return p;
}

}  // namespace jitllm::server
