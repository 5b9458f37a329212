#include "daemon/server/rpc_service.h"

#include <capnp/message.h>
#include <fcntl.h>
#include <kj/vector.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <set>

#include "daemon/server/kj_errors.h"
#include "daemon/server/model_name.h"
#include "daemon/server/rpc_generation.h"
#include "engine/chat/chat_template.h"
#include "policies/policy.h"

namespace jitllm::server {
namespace {

kj::StringPtr text(const std::string& s) { return kj::StringPtr(s.c_str(), s.size()); }

// One-shot wake-up from another thread into this KJ loop, as a std::function (copyable).
std::pair<kj::Promise<void>, std::function<void()>> crossThreadWaker() {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
  return {kj::mv(paf.promise), [f] { (*f)->fulfill(); }};
}

rpc::EventKind toRpc(EventKind k) {
  switch (k) {
    case EventKind::kDaemon:
      return rpc::EventKind::DAEMON;
    case EventKind::kDevice:
      return rpc::EventKind::DEVICE;
    case EventKind::kModel:
      return rpc::EventKind::MODEL;
    case EventKind::kSession:
      return rpc::EventKind::SESSION;
    case EventKind::kMigration:
      return rpc::EventKind::MIGRATION;
  }
  return rpc::EventKind::DAEMON;
}

// `peer` sees its own sessions only, unless it is an admin.
void fillModelInfo(const ModelHost& host, rpc::ModelInfo::Builder b, const PeerCredentials& peer, bool admin) {
  const runtime::Model& m = host.model();
  const auto& c = m.config();
  b.setName(text(host.name()));
  b.setPath(text(host.path()));
  b.setArchitecture(runtime::architectureName(c.arch));
  b.setFileBytes(m.file().fileSize());
  b.setLayers(uint32_t(c.layers));
  b.setVocabSize(uint32_t(c.vocabSize));
  b.setContextLength(uint32_t(std::min<int64_t>(c.contextLength, UINT32_MAX)));
  b.setContextSize(uint32_t(host.options().defaultContext));
  b.setChatTemplate(host.chatTemplate().family());
  b.setLoadedUnixMs(host.loadedUnixMs());
  b.setReplicaOf(text(host.options().replicaOf));
  // Everything that changes with migrations comes from the worker's snapshot, not the model.
  const ModelSnapshot snap = host.snapshot();
  const auto& units = snap.units;
  // Placement: runs of consecutive units on one device.
  std::vector<std::pair<int, int>> runs;
  for (int u = 0; u < int(units.size()); u++) {
    if (runs.empty() || units[size_t(u)].device != units[size_t(runs.back().first)].device) {
      runs.push_back({u, u});
    } else {
      runs.back().second = u;
    }
  }
  auto placement = b.initPlacement(uint32_t(runs.size()));
  for (size_t i = 0; i < runs.size(); i++) {
    auto r = placement[uint32_t(i)];
    r.setFirst(uint32_t(runs[i].first));
    r.setLast(uint32_t(runs[i].second));
    r.setDevice(text(units[size_t(runs[i].first)].device));
    r.setFirstName(text(units[size_t(runs[i].first)].name));
    r.setLastName(text(units[size_t(runs[i].second)].name));
  }
  // Weight and KV bytes per device.
  std::vector<std::pair<std::string, uint64_t>> weights;
  for (const UnitSnapshot& u : units) {
    auto it = std::find_if(weights.begin(), weights.end(), [&](const auto& w) { return w.first == u.device; });
    if (it == weights.end()) {
      weights.emplace_back(u.device, u.weightBytes);
    } else {
      it->second += u.weightBytes;
    }
  }
  auto memory = b.initMemory(uint32_t(weights.size()));
  for (size_t i = 0; i < weights.size(); i++) {
    memory[uint32_t(i)].setDevice(text(weights[i].first));
    memory[uint32_t(i)].setWeightBytes(weights[i].second);
    for (const auto& [d, kv] : snap.kvBytesByDevice) {
      if (d == weights[i].first) memory[uint32_t(i)].setKvBytes(kv);
    }
  }
  // Sessions (running and idle) are their owners' and the admins' to see.
  std::set<uint64_t> visibleIds;
  for (const auto* list : {&snap.sessions, &snap.idle}) {
    for (const auto& s : *list) {
      if (admin || s.ownerUid == peer.uid) visibleIds.insert(s.id);
    }
  }
  auto layers = b.initLayerStates(uint32_t(units.size()));
  for (size_t i = 0; i < units.size(); i++) {
    const UnitSnapshot& u = units[i];
    auto l = layers[uint32_t(i)];
    l.setUnit(uint32_t(i));
    l.setName(text(u.name));
    l.setDevice(text(u.device));
    l.setResidency(text(std::string(residencyName(u.residency))));
    l.setStagedOn(text(u.stagedOn));
    l.setWeightBytes(u.weightBytes);
    l.setKernelsReady(u.kernelsReady);
    l.setPinned(text(u.pinned));
    l.setKvPages(uint32_t(u.kvPages));
    l.setKvBytes(u.kvBytes);
    std::vector<std::pair<uint64_t, uint32_t>> shown;
    for (const auto& sp : u.sessionPages) {
      if (visibleIds.count(sp.first)) shown.push_back(sp);
    }
    auto list = l.initSessions(uint32_t(shown.size()));
    for (size_t j = 0; j < shown.size(); j++) {
      list[uint32_t(j)].setSessionId(shown[j].first);
      list[uint32_t(j)].setPages(shown[j].second);
    }
  }
  b.setMigration(text(snap.migration));
  auto fill = [&](const std::vector<SessionSnapshot>& all, auto init) {
    std::vector<SessionSnapshot> visible;
    for (const auto& s : all) {
      if (visibleIds.count(s.id)) visible.push_back(s);
    }
    auto sessions = init(uint32_t(visible.size()));
    for (size_t i = 0; i < visible.size(); i++) {
      const auto& s = visible[i];
      sessions[uint32_t(i)].setId(s.id);
      sessions[uint32_t(i)].setOwnerUid(s.ownerUid);
      sessions[uint32_t(i)].setTokens(uint32_t(s.tokens));
      sessions[uint32_t(i)].setContextLimit(uint32_t(s.contextLimit));
      sessions[uint32_t(i)].setState(text(std::string(sessionStateName(s.state))));
      sessions[uint32_t(i)].setTier(text(std::string(tierName(s.tier))));
    }
  };
  fill(snap.sessions, [&](uint32_t n) { return b.initSessions(n); });
  fill(snap.idle, [&](uint32_t n) { return b.initIdleSessions(n); });
  b.setParkedKvBytes(snap.parkedKvBytes);
  b.setState(text(std::string(modelStateName(snap.state))));
  auto goodput = b.initGoodput(uint32_t(snap.goodput.size()));
  for (size_t i = 0; i < snap.goodput.size(); i++) {
    const TierGoodput& g = snap.goodput[i];
    auto out = goodput[uint32_t(i)];
    out.setTier(text(std::string(tierName(g.tier))));
    out.setTtftTargetMs(g.targets.ttftMs);
    out.setTpotTargetMs(g.targets.tpotMs);
    out.setFinished(g.finished);
    out.setMet(g.met);
    out.setMetPerSecond(g.metPerSecond);
  }
}

// Streams one job's output to the client's sink until it finishes, then fills the results.
// At most kMaxChunksInFlight chunks wait for the client's answer; while they do, tokens pile up
// in the job, which throttles the session once max_queued_tokens wait there.
class GenerationStream final {
 public:
  static constexpr size_t kMaxChunksInFlight = 4;

  GenerationStream(std::shared_ptr<GenerationJob> job, rpc::TokenSink::Client sink, DaemonCore& core,
                   ReplyWakeups& wakeups)
      : job_(std::move(job)), sink_(kj::mv(sink)), reply_(core.replyStarted()), wakeups_(wakeups) {}
  // Dropping the stream (the call was cancelled or the client left) cancels the job.
  ~GenerationStream() { job_->cancel(); }

  kj::Promise<GenerationJob::Batch> run() {
    if (inFlight_.size() >= kMaxChunksInFlight) {
      // The client answers in order: wait for the oldest chunk.
      auto oldest = kj::mv(inFlight_.front());
      inFlight_.pop_front();
      return oldest.then([this] { return run(); });
    }
    auto batch = job_->take();
    if (!batch.ids.empty() || !batch.text.empty()) {
      allIds_.insert(allIds_.end(), batch.ids.begin(), batch.ids.end());
      allText_ += batch.text;
      auto request = sink_.tokensRequest();
      auto ids = request.initIds(uint32_t(batch.ids.size()));
      for (size_t i = 0; i < batch.ids.size(); i++) ids.set(uint32_t(i), batch.ids[i]);
      request.setText(text(batch.text));
      inFlight_.push_back(request.send().ignoreResult());
    }
    if (batch.finished) {
      // Every chunk must have reached the client before the call returns.
      kj::Vector<kj::Promise<void>> pending;
      for (auto& p : inFlight_) pending.add(kj::mv(p));
      inFlight_.clear();
      auto all = kj::joinPromises(pending.releaseAsArray());
      return all.then([batch = kj::mv(batch)]() mutable { return kj::mv(batch); });
    }
    auto [more, waker] = wakeups_.arm();
    job_->setWaker(waker);
    return more.then([this] { return run(); });
  }

  const std::vector<int32_t>& ids() const { return allIds_; }
  const std::string& allText() const { return allText_; }

 private:
  std::shared_ptr<GenerationJob> job_;
  rpc::TokenSink::Client sink_;
  std::deque<kj::Promise<void>> inFlight_;
  DaemonCore::ReplyGuard reply_;  // counted until the reply is sent, so a drain waits for it
  ReplyWakeups& wakeups_;
  std::vector<int32_t> allIds_;
  std::string allText_;
};

void fillEvent(const DaemonEvent& e, rpc::Event::Builder b) {
  b.setUnixMs(e.unixMs);
  b.setKind(toRpc(e.kind));
  b.setWhat(text(e.what));
  b.setModel(text(e.model));
  b.setDevice(text(e.device));
  b.setSessionId(e.sessionId);
  b.setMessage(text(e.message));
}

// Streams daemon events to a subscriber until the Subscription capability is dropped.
class EventSubscription final : public rpc::Subscription::Server {
 public:
  EventSubscription(std::shared_ptr<EventMailbox> box, rpc::EventSink::Client sink)
      : box_(std::move(box)), sink_(kj::mv(sink)), pump_(run().eagerlyEvaluate([](kj::Exception&& e) {
          spdlog::debug("event subscriber gone: {}", e.getDescription().cStr());
        })) {}

 private:
  kj::Promise<void> run() {
    size_t dropped = 0;
    auto events = box_->take(&dropped);
    kj::Promise<void> sent = kj::READY_NOW;
    if (dropped > 0) {
      DaemonEvent note;
      note.what = "events.dropped";
      note.message = std::to_string(dropped) + " events were dropped: the subscriber reads too slowly";
      events.insert(events.begin(), note);
    }
    for (const auto& e : events) {
      auto request = sink_.eventRequest();
      fillEvent(e, request.initEvent());
      sent = sent.then([request = kj::mv(request)]() mutable { return request.send(); });
    }
    return sent
        .then([this] {
          auto [more, waker] = crossThreadWaker();
          box_->setWaker(waker);
          return kj::mv(more);
        })
        .then([this] { return run(); });
  }

  std::shared_ptr<EventMailbox> box_;
  rpc::EventSink::Client sink_;
  kj::Promise<void> pump_;
};

// A File capability's descriptor, duplicated so it outlives the capability.
int dupFd(int fd) {
  int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  JITLLM_REQUIRE(copy >= 0, "cannot duplicate the passed file descriptor");
  return copy;
}

}  // namespace

DaemonService::DaemonService(DaemonCore& core, BackgroundThreads& background, ReplyWakeups& wakeups,
                             PeerCredentials peer, std::shared_ptr<ConnectionActivity> activity)
    : core_(core),
      background_(background),
      wakeups_(wakeups),
      intake_(core, background),
      peer_(peer),
      activity_(std::move(activity)) {}

kj::Promise<void> DaemonService::version(VersionContext context) {
  auto v = context.getResults().initVersion();
  v.setMajor(JITLLM_VERSION_MAJOR);
  v.setMinor(JITLLM_VERSION_MINOR);
  v.setPatch(JITLLM_VERSION_PATCH);
  v.setProtocol(rpc::PROTOCOL_VERSION);
  v.setBuild(JITLLM_BUILD_INFO);
  return kj::READY_NOW;
}

kj::Promise<void> DaemonService::devices(DevicesContext context) {
  const auto devices = core_.deviceTable().all();
  auto list = context.getResults().initDevices(uint32_t(devices.size()));
  for (size_t i = 0; i < devices.size(); i++) {
    const DeviceStatus& s = devices[i];
    const DeviceInfo& d = s.device->info();
    auto b = list[uint32_t(i)];
    b.setId(text(d.id.str()));
    b.setBackend(text(d.id.backend));
    b.setName(text(d.name));
    b.setMemoryTotal(d.memoryBudget);
    b.setMemoryUsed(s.device->memoryUsed());
    b.setThreads(uint32_t(d.threads));
    b.setSoftware(d.software);
    b.setOnline(s.online);
    b.setOfflineReason(text(s.offlineReason));
    auto t = b.initTelemetry();
    t.setTemperatureC(float(s.readings.temperatureC));
    t.setUtilization(float(s.readings.utilization));
    t.setPowerWatts(float(s.readings.powerWatts));
  }
  return kj::READY_NOW;
}

kj::Promise<void> DaemonService::models(ModelsContext context) {
  const auto hosts = core_.models();
  auto list = context.getResults().initModels(uint32_t(hosts.size()));
  const bool admin = core_.access().isAdmin(peer_.uid);
  for (size_t i = 0; i < hosts.size(); i++) fillModelInfo(*hosts[i], list[uint32_t(i)], peer_, admin);
  return kj::READY_NOW;
}

kj::Promise<void> DaemonService::load(LoadContext context) {
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "load");
    auto params = context.getParams();
    auto options = params.getOptions();
    auto request = std::make_shared<LoadRequest>();
    request->name = options.getName();
    if (!request->name.empty()) requireValidModelName(request->name);  // before the file is read
    request->contextSize = options.getContextSize();
    for (capnp::Text::Reader id : options.getDevices()) request->devices.push_back(DeviceId::parse(id.cStr()));
    switch (options.getKvPrecision()) {
      case rpc::KvPrecision::DEFAULT:
        break;
      case rpc::KvPrecision::F32:
        request->kvPrecision = KvPrecision::kF32;
        break;
      case rpc::KvPrecision::F16:
        request->kvPrecision = KvPrecision::kF16;
        break;
      default:
        JITLLM_FAIL(kFailed, "unknown KV precision ", uint16_t(options.getKvPrecision()));
    }
    request->maxDeviceBytes = options.getMaxDeviceBytes();
    auto progress = params.hasProgress() ? kj::Maybe<rpc::ProgressSink::Client>(params.getProgress())
                                         : kj::Maybe<rpc::ProgressSink::Client>(nullptr);
    auto source = params.getSource();
    kj::Promise<void> ready = kj::READY_NOW;
    if (source.isPath()) {
      request->path = source.getPath();
      JITLLM_REQUIRE(!request->path.empty() && request->path[0] == '/', "load: the path must be absolute");
      JITLLM_REQUIRE(core_.access().canRead(request->path, peer_.uid), "load: you (uid ", peer_.uid, ") cannot read '",
                     request->path, "'");
    } else {
      ready = source.getFile().getFd().then([request](kj::Maybe<int> fd) {
        KJ_IF_MAYBE (f, fd) {
          request->fd = dupFd(*f);
        } else {
          JITLLM_FAIL(kFailed, "load: no file descriptor came with the request");
        }
      });
    }
    // The progress sink is a Cap'n Proto object: it lives and dies on this (the RPC) thread. The
    // loader thread only holds a plain relay and reaches the sink through executeSync, which
    // runs on this thread too, so the two never race; once the call is gone, `sink` is null.
    struct ProgressRelay {
      kj::Maybe<rpc::ProgressSink::Client>* sink = nullptr;
    };
    auto relay = std::make_shared<ProgressRelay>();
    auto sinkHolder = kj::heap<kj::Maybe<rpc::ProgressSink::Client>>(kj::mv(progress));
    relay->sink = sinkHolder.get();
    struct Unhook {
      std::shared_ptr<ProgressRelay> relay;
      ~Unhook() { relay->sink = nullptr; }
    };
    auto unhook = kj::heap<Unhook>(Unhook{relay});
    return ready
        .then([this, request, relay]() mutable {
          const kj::Executor& executor = kj::getCurrentThreadExecutor();
          std::function<std::string()> work = [this, request, relay, &executor]() -> std::string {
            struct CloseFd {
              int fd;
              ~CloseFd() {
                if (fd >= 0) ::close(fd);
              }
            } closer{request->fd};
            auto host = core_.load(*request, [&](const std::string& stage, uint64_t done, uint64_t total) {
              // `relay` by value: the RPC thread then reads its own copy, not this closure's.
              executor.executeSync([&, relay] {
                if (relay->sink == nullptr) return;
                KJ_IF_MAYBE (s, *relay->sink) {
                  auto r = s->progressRequest();
                  r.setStage(text(stage));
                  r.setDone(done);
                  r.setTotal(total);
                  r.send().detach([](kj::Exception&&) {});
                }
              });
            });
            return host->name();
          };
          return background_.run(work);
        })
        .then([this, context](std::string name) mutable {
          return translateErrors(
              [&] { fillModelInfo(*core_.find(name), context.getResults().initModel(), peer_, true); });
        })
        .attach(kj::mv(unhook), kj::mv(sinkHolder));
  });
}

kj::Promise<void> DaemonService::replicate(ReplicateContext context) {
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "replicate");
    const std::string name = context.getParams().getModel();
    const DeviceId device = DeviceId::parse(std::string_view(context.getParams().getDevice().cStr()));
    core_.find(name);  // a clear error for an unknown name, before a thread is busy with it
    std::function<std::string()> work = [this, name, device] { return core_.replicate(name, device)->name(); };
    return background_.run(work).then([this, context](std::string replica) mutable {
      return translateErrors(
          [&] { fillModelInfo(*core_.find(replica), context.getResults().initModel(), peer_, true); });
    });
  });
}

kj::Promise<void> DaemonService::unload(UnloadContext context) {
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "unload");
    std::string name = context.getParams().getName();
    core_.find(name);  // a clear error for an unknown name
    return background_
        .run(std::function<bool()>([this, name] {
          core_.unload(name);
          return true;
        }))
        .ignoreResult();
  });
}

namespace {
// The RPC's request as the daemon's, its RequestErrors in the RPC's words.
template <typename Reader>
GenerationRequest requestFromRpcOrThrow(Reader r) {
  try {
    return requestFromRpc(r);
  } catch (const RequestError& e) {
    throw rpcErrorFor(e);
  }
}
}  // namespace

struct DaemonService::Reply {
  virtual ~Reply() = default;
  virtual void fill(const std::vector<int32_t>& ids, const std::string& text, const GenerationStats& stats) = 0;
};

namespace {
template <typename Context>
struct ContextReply final : DaemonService::Reply {
  explicit ContextReply(Context c) : context(kj::mv(c)) {}
  void fill(const std::vector<int32_t>& ids, const std::string& t, const GenerationStats& s) override {
    auto r = context.getResults();
    auto list = r.initTokens(uint32_t(ids.size()));
    for (size_t i = 0; i < ids.size(); i++) list.set(uint32_t(i), ids[i]);
    r.setText(text(t));
    fillStats(s, r.initStats());
  }
  Context context;
};
}  // namespace

kj::Promise<void> DaemonService::startGeneration(GenerationRequest request, rpc::TokenSink::Client sink,
                                                 kj::Own<Reply> reply) {
  const std::string model = request.model;
  auto host = core_.route(model);
  const Caller caller{peer_.uid, core_.access().isAdmin(peer_.uid), false};
  kj::Promise<QueuedGeneration> queued = nullptr;
  try {
    queued = intake_.start(host, std::move(request), caller, [this, model] { return core_.route(model); });
  } catch (const RequestError& e) {
    throw rpcErrorFor(e);
  }
  activity_->generations++;
  auto busy = kj::defer([activity = activity_] { activity->generations--; });
  return queued
      .then([this, sink = kj::mv(sink), reply = kj::mv(reply)](QueuedGeneration queued) mutable {
        auto stream = kj::heap<GenerationStream>(queued.job, kj::mv(sink), core_, wakeups_);
        auto& s = *stream;
        return s.run()
            .then([&s, reply = kj::mv(reply)](GenerationJob::Batch last) mutable {
              if (last.error) kj::throwFatalException(toKjException(*last.error));
              reply->fill(s.ids(), s.allText(), last.stats);
            })
            .attach(kj::mv(stream), kj::mv(queued.host));
      })
      .attach(kj::mv(host), kj::mv(busy));
}

kj::Promise<void> DaemonService::generate(GenerateContext context) {
  // Cap'n Proto 0.9 lets a dropped call be cancelled only when the method says so; dropping a
  // generation must stop it (and free its KV pages).
  context.allowCancellation();
  return translateErrors([&]() -> kj::Promise<void> {
    auto params = context.getParams();
    return startGeneration(requestFromRpcOrThrow(params.getRequest()), params.getSink(),
                           kj::heap<ContextReply<GenerateContext>>(context));
  });
}

kj::Promise<void> DaemonService::chat(ChatContext context) {
  context.allowCancellation();
  return translateErrors([&]() -> kj::Promise<void> {
    auto params = context.getParams();
    return startGeneration(requestFromRpcOrThrow(params.getRequest()), params.getSink(),
                           kj::heap<ContextReply<ChatContext>>(context));
  });
}

kj::Promise<void> DaemonService::events(EventsContext context) {
  auto params = context.getParams();
  // Admins see every event; anyone else none about other users' sessions.
  const std::optional<uint32_t> viewer =
      core_.access().isAdmin(peer_.uid) ? std::nullopt : std::optional<uint32_t>(peer_.uid);
  auto box = core_.events().subscribe(std::min<size_t>(params.getReplay(), EventHub::kHistory), viewer);
  auto sink = params.getSink();
  // The replayed history reaches the subscriber before the call returns; live events follow.
  size_t dropped = 0;
  kj::Promise<void> replayed = kj::READY_NOW;
  for (const auto& e : box->take(&dropped)) {
    auto request = sink.eventRequest();
    fillEvent(e, request.initEvent());
    replayed = replayed.then([request = kj::mv(request)]() mutable { return request.send(); });
  }
  return replayed.then([context, box = std::move(box), sink, activity = activity_]() mutable {
    activity->subscriptions++;
    context.getResults().setSubscription(
        kj::heap<EventSubscription>(std::move(box), kj::mv(sink)).attach(kj::defer([activity] {
          activity->subscriptions--;
        })));
  });
}

namespace {

void fillMigrationStats(const MigrationResult& r, rpc::MigrationStats::Builder b) {
  b.setId(r.id);
  b.setModel(text(r.model));
  b.setFirstName(text(r.firstName));
  b.setLastName(text(r.lastName));
  b.setFrom(text(r.stats.from));
  b.setTo(text(r.to));
  b.setUnits(uint32_t(r.stats.units));
  b.setCommitted(r.committed);
  b.setPrepareMs(r.stats.prepareMs);
  b.setPauseMs(r.stats.pauseMs);
  b.setBytesPrecopied(r.stats.bytesPrecopied);
  b.setBytesInPause(r.stats.bytesInPause);
  b.setWeightBytes(r.stats.weightBytes);
  b.setRecomputedTokens(uint32_t(r.stats.recomputedTokens));
  b.setSessions(uint32_t(r.stats.sessions));
}

// Waits for a migration on the RPC loop without blocking it. Dropping the promise (the client
// cancelled the call or went away) cancels a migration that has not committed yet.
kj::Promise<MigrationResult> whenDone(std::shared_ptr<MigrationTicket> ticket) {
  struct CancelIfDropped {
    explicit CancelIfDropped(std::shared_ptr<MigrationTicket> t) : ticket(std::move(t)) {}
    CancelIfDropped(const CancelIfDropped&) = delete;
    std::shared_ptr<MigrationTicket> ticket;
    ~CancelIfDropped() {
      if (!ticket->done()) ticket->cancel();
    }
  };
  auto [done, waker] = crossThreadWaker();
  ticket->setWaker(waker);
  return done
      .then([ticket]() -> MigrationResult {
        if (auto error = ticket->error()) kj::throwFatalException(toKjException(*error));
        return ticket->result();
      })
      .attach(kj::heap<CancelIfDropped>(ticket));
}

// A migrate or tensorParallel call's answer: at once (without `wait`: what is about to happen), or
// once the worker committed or gave up.
template <class Context, class Host>
kj::Promise<void> answerMigration(Context& context, Host host, std::shared_ptr<MigrationTicket> ticket, bool wait) {
  if (!wait) {
    fillMigrationStats(ticket->result(), context.getResults().initStats());
    return kj::READY_NOW;
  }
  return whenDone(ticket)
      .then([context](MigrationResult result) mutable { fillMigrationStats(result, context.getResults().initStats()); })
      .attach(kj::mv(host));
}

}  // namespace

kj::Promise<void> DaemonService::migrate(MigrateContext context) {
  context.allowCancellation();
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "migrate");
    auto r = context.getParams().getRequest();
    auto host = core_.find(r.getModel());
    MigrationRequest request;
    request.layers = r.getLayers();
    request.target = &core_.device(std::string_view(r.getDevice().cStr()));
    request.precopy = r.getPrecopy();
    request.force = r.getForce();
    return answerMigration(context, host, host->migrate(request), r.getWait());
  });
}

kj::Promise<void> DaemonService::tensorParallel(TensorParallelContext context) {
  context.allowCancellation();
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "tensorParallel");
    auto r = context.getParams().getRequest();
    auto host = core_.find(r.getModel());
    MigrationRequest request;
    request.layers = r.getLayers();
    JITLLM_REQUIRE(r.getSplit().size() > 0, "name the devices to split over (e.g. cuda:0,cuda:1)");
    for (auto id : r.getSplit()) request.split.push_back(&core_.device(std::string_view(id.cStr())));
    request.target = request.split.front();
    request.precopy = r.getPrecopy();
    request.force = r.getForce();
    request.partialSums = r.getPartialSums();
    return answerMigration(context, host, host->migrate(request), r.getWait());
  });
}

kj::Promise<void> DaemonService::pin(PinContext context) {
  context.allowCancellation();
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "pin");
    auto params = context.getParams();
    auto host = core_.find(params.getModel());
    MigrationRequest request;
    request.layers = params.getLayers();
    request.target = &core_.device(std::string_view(params.getDevice().cStr()));
    request.force = true;  // pinning somewhere is the explicit word that overrides older pins
    request.pinAfter = true;
    return whenDone(host->migrate(request))
        .then(
            [context](MigrationResult result) mutable { fillMigrationStats(result, context.getResults().initStats()); })
        .attach(kj::mv(host));
  });
}

kj::Promise<void> DaemonService::unpin(UnpinContext context) {
  return translateErrors([&]() -> kj::Promise<void> {
    core_.access().requireAdmin(peer_.uid, "unpin");
    auto params = context.getParams();
    core_.find(params.getModel())->unpin(params.getLayers());
    return kj::READY_NOW;
  });
}

kj::Promise<void> DaemonService::policy(PolicyContext context) {
  return translateErrors([&]() -> kj::Promise<void> {
    const std::string name = context.getParams().getName();
    PolicyControl& control = core_.policyControl();
    if (!name.empty()) {
      core_.access().requireAdmin(peer_.uid, "policy");
      control.setPolicy(name);
    }
    auto results = context.getResults();
    results.setName(text(control.policyName()));
    const auto& names = policies::policyNames();
    auto list = results.initAvailable(uint32_t(names.size()));
    for (size_t i = 0; i < names.size(); i++) list.set(uint32_t(i), text(names[i]));
    return kj::READY_NOW;
  });
}

kj::Promise<void> DaemonService::cancelSession(CancelSessionContext context) {
  return translateErrors([&]() -> kj::Promise<void> {
    const uint64_t id = context.getParams().getSessionId();
    const bool admin = core_.access().isAdmin(peer_.uid);
    for (const auto& host : core_.models()) {
      if (host->cancelSession(id, peer_.uid, admin)) return kj::READY_NOW;
    }
    JITLLM_FAIL(kFailed, "no running session has id ", id, " (see jitllmctl ps)");
  });
}

}  // namespace jitllm::server
