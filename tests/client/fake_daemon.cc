#include "fake_daemon.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <future>
#include <list>
#include <map>
#include <stdexcept>

#include "jitllm/jitllm.capnp.h"

namespace jitllm::testing {
namespace {

using Shared = FakeDaemon::SharedState;

[[noreturn]] void fail(kj::Exception::Type type, kj::StringPtr message) {
  kj::throwFatalException(kj::Exception(type, __FILE__, __LINE__, kj::heapString(message)));
}

template <typename F>
void update(Shared& shared, F&& f) {
  {
    std::lock_guard lock(shared.mutex);
    f(shared.record);
  }
  shared.changed.notify_all();
}

constexpr unsigned kUnits = 7;  // token_embd, blk.0..blk.4, output
constexpr uint64_t kUnitWeightBytes = 128 * 1024;
constexpr uint32_t kTokensPerPage = 4;
constexpr uint64_t kPageBytes = 4096;

std::string unitName(unsigned unit) {
  if (unit == 0) return "token_embd";
  if (unit == kUnits - 1) return "output";
  return "blk." + std::to_string(unit - 1);
}

struct FakeModel {
  std::string name;
  std::string path;
  std::map<uint64_t, uint32_t> sessions;                                        // id -> tokens so far
  std::vector<std::string> device = std::vector<std::string>(kUnits, "cpu:0");  // per unit
  std::vector<std::string> pinned = std::vector<std::string>(kUnits);
  std::vector<std::string> stagedOn = std::vector<std::string>(kUnits);
  std::string migration = {};  // the one in progress (a --no-wait one never ends here)
};

struct StoredEvent {
  rpc::EventKind kind;
  std::string what, model, message;
  uint64_t sessionId = 0;
  std::string device = {};
};

// A parsed layer range: units first..last, inclusive.
struct UnitRange {
  unsigned first = 0;
  unsigned last = kUnits - 1;
};

// One end of a range, as the daemon reads it: a block number or a named end.
unsigned parseUnit(const std::string& text, const std::string& range) {
  if (text == "token_embd" || text == "embd") return 0;
  if (text == "output" || text == "head") return kUnits - 1;
  unsigned block = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), block);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || block >= kUnits - 2) {
    fail(kj::Exception::Type::FAILED, kj::str("bad layer range '", range.c_str(), "': '", text.c_str(),
                                              "' is not a block (0-4), token_embd or output"));
  }
  return block + 1;
}

UnitRange parseRange(const std::string& range) {
  if (range.empty()) return {};
  const size_t dash = range.find('-');
  UnitRange r;
  r.first = parseUnit(range.substr(0, dash), range);
  r.last = dash == std::string::npos ? r.first : parseUnit(range.substr(dash + 1), range);
  if (r.first > r.last)
    fail(kj::Exception::Type::FAILED, kj::str("bad layer range '", range.c_str(), "': it runs backwards"));
  return r;
}

class FakeDaemonServer;

// Unsubscribes its sink when the client drops it.
class SubscriptionServer final : public rpc::Subscription::Server {
 public:
  SubscriptionServer(FakeDaemonServer& daemon, std::list<rpc::EventSink::Client>::iterator it)
      : daemon_(daemon), it_(it) {}
  ~SubscriptionServer();

 private:
  FakeDaemonServer& daemon_;
  std::list<rpc::EventSink::Client>::iterator it_;
};

class FakeDaemonServer final : public rpc::Daemon::Server, private kj::TaskSet::ErrorHandler {
 public:
  FakeDaemonServer(Shared& shared, kj::Timer& timer, FakeDaemon::Options options, kj::PromiseFulfiller<void>& hangup)
      : shared_(shared), timer_(timer), options_(options), hangup_(hangup), tasks_(*this) {}

  void unsubscribe(std::list<rpc::EventSink::Client>::iterator it) {
    subscribers_.erase(it);
    update(shared_, [](FakeDaemonRecord& r) { r.subscriptionsEnded++; });
  }

 protected:
  kj::Promise<void> version(VersionContext context) override {
    auto v = context.initResults().initVersion();
    v.setMajor(0);
    v.setMinor(1);
    v.setPatch(0);
    v.setProtocol(options_.protocol ? options_.protocol : rpc::PROTOCOL_VERSION);
    v.setBuild("fake daemon for tests");
    return kj::READY_NOW;
  }

  kj::Promise<void> devices(DevicesContext context) override {
    auto list = context.initResults().initDevices(1);
    list[0].setId("cpu:0");
    list[0].setBackend("cpu");
    list[0].setName("Fake \"CPU\"");
    list[0].setMemoryTotal(uint64_t(8) << 30);
    list[0].setMemoryUsed(uint64_t(1) << 20);
    list[0].setThreads(2);
    auto t = list[0].initTelemetry();
    t.setTemperatureC(std::numeric_limits<float>::quiet_NaN());
    t.setUtilization(0.25f);
    t.setPowerWatts(std::numeric_limits<float>::quiet_NaN());
    return kj::READY_NOW;
  }

  kj::Promise<void> models(ModelsContext context) override {
    auto list = context.initResults().initModels(unsigned(models_.size()));
    for (size_t i = 0; i < models_.size(); i++) fill(list[unsigned(i)], models_[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> load(LoadContext context) override {
    auto params = context.getParams();
    auto options = params.getOptions();
    std::string name = options.getName().size() ? options.getName().cStr() : "model";
    const uint64_t cap = options.getMaxDeviceBytes();
    update(shared_, [&](FakeDaemonRecord& r) { r.loadMaxDeviceBytes.push_back(cap); });
    for (const auto& m : models_) {
      if (m.name == name)
        fail(kj::Exception::Type::FAILED, kj::str("a model named ", name.c_str(), " is loaded already"));
    }
    auto path = std::make_shared<std::string>();
    kj::Promise<void> opened = kj::READY_NOW;
    if (params.getSource().isPath()) {
      *path = params.getSource().getPath().cStr();
      update(shared_, [&](FakeDaemonRecord& r) { r.loadedPaths.push_back(*path); });
    } else {
      opened = params.getSource().getFile().getFd().then([this, path](kj::Maybe<int> fd) {
        int raw = -1;
        KJ_IF_MAYBE (f, fd) {
          raw = *f;
        }
        if (raw < 0) fail(kj::Exception::Type::FAILED, "the File capability carried no descriptor");
        char magic[4] = {};
        const ssize_t n = ::pread(raw, magic, 4, 0);
        std::string m(magic, n > 0 ? size_t(n) : 0);
        update(shared_, [&](FakeDaemonRecord& r) { r.fileMagics.push_back(m); });
        if (m != "GGUF") fail(kj::Exception::Type::FAILED, "the file is not a GGUF model (bad magic)");
        *path = "fd:" + std::to_string(raw);
      });
    }
    kj::Maybe<rpc::ProgressSink::Client> progress;
    if (params.hasProgress()) progress = params.getProgress();
    return opened.then([this, context, name, path, progress = kj::mv(progress)]() mutable -> kj::Promise<void> {
      kj::Promise<void> reported = kj::READY_NOW;
      KJ_IF_MAYBE (sink, progress) {
        for (uint64_t step = 1; step <= 3; step++) {
          reported = reported.then([sink = *sink, step]() mutable {
            auto req = sink.progressRequest();
            req.setStage(step < 3 ? "read" : "bind");
            req.setDone(step);
            req.setTotal(3);
            return req.send();
          });
        }
      }
      return reported.then([this, context, name, path]() mutable {
        models_.push_back({name, *path, {}});
        fill(context.initResults().initModel(), models_.back());
        emit({rpc::EventKind::MODEL, "loaded", name, "loaded " + name + " from " + *path});
      });
    });
  }

  kj::Promise<void> unload(UnloadContext context) override {
    const std::string name = context.getParams().getName().cStr();
    for (auto it = models_.begin(); it != models_.end(); ++it) {
      if (it->name == name) {
        models_.erase(it);
        emit({rpc::EventKind::MODEL, "unloaded", name, "unloaded " + name});
        return kj::READY_NOW;
      }
    }
    fail(kj::Exception::Type::FAILED, kj::str("no model named '", name.c_str(), "' is loaded"));
  }

  kj::Promise<void> generate(GenerateContext context) override {
    auto request = context.getParams().getRequest();
    const std::string model = request.getModel().cStr();
    checkModel(model);
    update(shared_, [&](FakeDaemonRecord& r) {
      if (request.getPrompt().isText())
        r.prompts.push_back(request.getPrompt().getText().cStr());
      else
        r.promptTokens.push_back(toVector(request.getPrompt().getTokens()));
      r.lastTemperature = request.getSampling().getTemperature();
      r.lastSeed = request.getSampling().getSeed();
      r.lastMaxTokens = request.getMaxTokens();
      r.lastTier = request.getTier().cStr();
    });
    std::vector<std::string> pieces;
    for (uint32_t i = 0; i < request.getMaxTokens(); i++) {
      std::string piece = "t";
      piece += std::to_string(i);
      piece += ' ';
      pieces.push_back(std::move(piece));
    }
    return reply(context, model, std::move(pieces),
                 request.getPrompt().isText() ? 5 : request.getPrompt().getTokens().size());
  }

  kj::Promise<void> chat(ChatContext context) override {
    auto request = context.getParams().getRequest();
    const std::string model = request.getModel().cStr();
    checkModel(model);
    std::string lastUser;
    for (auto m : request.getMessages()) {
      if (m.getRole() == "user") lastUser = m.getContent().cStr();
    }
    update(shared_, [&](FakeDaemonRecord& r) {
      r.chatHistorySizes.push_back(request.getMessages().size());
      r.chatLastUser.push_back(lastUser);
    });
    std::vector<std::string> pieces = {"you ", "said: "};
    pieces.push_back(lastUser);
    return reply(context, model, std::move(pieces), 7);
  }

  kj::Promise<void> events(EventsContext context) override {
    auto params = context.getParams();
    auto sink = params.getSink();
    const size_t replay = std::min<size_t>(params.getReplay(), history_.size());
    kj::Promise<void> replayed = kj::READY_NOW;
    for (size_t i = history_.size() - replay; i < history_.size(); i++) {
      replayed = replayed.then([this, sink, i]() mutable { return send(sink, history_[i]); });
    }
    return replayed.then([this, context, sink]() mutable {
      subscribers_.push_back(kj::mv(sink));
      context.initResults().setSubscription(kj::heap<SubscriptionServer>(*this, std::prev(subscribers_.end())));
    });
  }

  kj::Promise<void> migrate(MigrateContext context) override {
    if (!options_.migration) return rpc::Daemon::Server::migrate(context);
    auto request = context.getParams().getRequest();
    FakeMigrateCall call{request.getModel(), request.getLayers(), request.getDevice()};
    call.wait = request.getWait();
    call.precopy = request.getPrecopy();
    call.force = request.getForce();
    update(shared_, [&](FakeDaemonRecord& r) { r.migrations.push_back(call); });
    FakeModel& m = modelForMigration(call.model, call.device);
    if (!m.migration.empty()) {
      fail(kj::Exception::Type::FAILED, kj::str("a migration of '", call.model.c_str(), "' is already running (",
                                                m.migration.c_str(), "): wait for its outcome in `jitllmctl events`"));
    }
    const UnitRange range = parseRange(call.layers);
    for (unsigned u = range.first; u <= range.last; u++) {
      if (!m.pinned[u].empty() && m.pinned[u] != call.device && !call.force) {
        fail(kj::Exception::Type::FAILED, kj::str(unitName(u).c_str(), " of '", call.model.c_str(), "' is pinned to ",
                                                  m.pinned[u].c_str(), ": unpin it (jitllmctl unpin ",
                                                  call.model.c_str(), ":", call.layers.c_str(), ") or pass --force"));
      }
    }
    auto stats = context.initResults().initStats();
    const unsigned moving = plan(m, range, call.device, stats);
    if (moving > 0 && !call.wait) {
      for (unsigned u = range.first; u <= range.last; u++) {
        if (m.device[u] != call.device) m.stagedOn[u] = call.device;
      }
      m.migration = "migration " + std::to_string(stats.getId()) + ": " + unitName(range.first) + "-" +
                    unitName(range.last) + " " + stats.getFrom().cStr() + " -> " + call.device + ", preparing";
      emit({rpc::EventKind::MIGRATION, "migration.preparing", call.model, m.migration, 0, call.device});
      return kj::READY_NOW;
    }
    if (moving == 0) return kj::READY_NOW;
    for (unsigned u = range.first; u <= range.last; u++) {
      m.device[u] = call.device;
      if (!m.pinned[u].empty()) m.pinned[u] = call.device;  // with --force, pins follow
    }
    stats.setCommitted(true);
    stats.setPrepareMs(12.34);
    stats.setPauseMs(0.412);
    stats.setBytesPrecopied(call.precopy ? 524288 : 0);
    stats.setBytesInPause(call.precopy ? 8192 : 524288 + 8192);
    stats.setRecomputedTokens(0);
    stats.setSessions(3);
    emit({rpc::EventKind::MIGRATION, "migration.preparing", call.model, "migration " + std::to_string(stats.getId()), 0,
          call.device});
    emit({rpc::EventKind::MIGRATION, "migration.committed", call.model,
          "migration " + std::to_string(stats.getId()) + ": " + unitName(range.first) + "-" + unitName(range.last) +
              " moved in a 0.412 ms pause",
          0, call.device});
    return kj::READY_NOW;
  }

  kj::Promise<void> pin(PinContext context) override {
    if (!options_.migration) return rpc::Daemon::Server::pin(context);
    auto params = context.getParams();
    FakeMigrateCall call{params.getModel(), params.getLayers(), params.getDevice()};
    update(shared_, [&](FakeDaemonRecord& r) { r.pins.push_back(call); });
    FakeModel& m = modelForMigration(call.model, call.device);
    const UnitRange range = parseRange(call.layers);
    auto stats = context.initResults().initStats();
    if (plan(m, range, call.device, stats) > 0) {
      stats.setCommitted(true);
      stats.setPrepareMs(3.5);
      stats.setPauseMs(0.25);
    }
    for (unsigned u = range.first; u <= range.last; u++) {
      m.device[u] = call.device;
      m.pinned[u] = call.device;
    }
    emit({rpc::EventKind::MIGRATION, "layers.pinned", call.model,
          unitName(range.first) + "-" + unitName(range.last) + " pinned to " + call.device, 0, call.device});
    return kj::READY_NOW;
  }

  kj::Promise<void> unpin(UnpinContext context) override {
    if (!options_.migration) return rpc::Daemon::Server::unpin(context);
    auto params = context.getParams();
    const std::string model = params.getModel(), layers = params.getLayers();
    update(shared_, [&](FakeDaemonRecord& r) { r.unpins.emplace_back(model, layers); });
    FakeModel* m = findModel(model);
    if (m == nullptr) fail(kj::Exception::Type::FAILED, kj::str("no model named '", model.c_str(), "' is loaded"));
    const UnitRange range = parseRange(layers);
    for (unsigned u = range.first; u <= range.last; u++) m->pinned[u].clear();
    emit({rpc::EventKind::MIGRATION, "layers.unpinned", model, unitName(range.first) + "-" + unitName(range.last)});
    return kj::READY_NOW;
  }

  kj::Promise<void> cancelSession(CancelSessionContext context) override {
    const uint64_t id = context.getParams().getSessionId();
    if (id == 999) fail(kj::Exception::Type::FAILED, "no session 999 is yours (see `jitllmctl ps`)");
    update(shared_, [&](FakeDaemonRecord& r) { r.cancelledSessions.push_back(id); });
    return kj::READY_NOW;
  }

 private:
  void taskFailed(kj::Exception&&) override {}  // a subscriber that went away

  static std::vector<int32_t> toVector(capnp::List<int32_t>::Reader r) {
    std::vector<int32_t> out;
    for (int32_t v : r) out.push_back(v);
    return out;
  }

  void checkModel(const std::string& model) {
    if (model == "overloaded") fail(kj::Exception::Type::OVERLOADED, "too many sessions: try again later");
    if (model == "unimplemented") fail(kj::Exception::Type::UNIMPLEMENTED, "this daemon cannot do that");
    if (model == "failed") fail(kj::Exception::Type::FAILED, "the request was wrong");
    if (model == "hangup") return;
    for (const auto& m : models_) {
      if (m.name == model) return;
    }
    fail(kj::Exception::Type::FAILED, kj::str("no model named '", model.c_str(), "' is loaded"));
  }

  FakeModel* findModel(const std::string& name) {
    for (auto& m : models_) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }

  // The model a migrate or pin names, once the target device is known to exist.
  FakeModel& modelForMigration(const std::string& model, const std::string& device) {
    checkModel(model);
    FakeModel* m = findModel(model);
    if (m == nullptr) fail(kj::Exception::Type::FAILED, kj::str("no model named '", model.c_str(), "' is loaded"));
    if (device != "cpu:0" && device != "cpu:1") {
      fail(kj::Exception::Type::FAILED, kj::str("no device '", device.c_str(), "' (devices: cpu:0, cpu:1)"));
    }
    return *m;
  }

  // Fills what a move of `range` to `device` would do (id, names, devices, units, weights) and
  // returns how many units it moves.
  unsigned plan(const FakeModel& m, UnitRange range, const std::string& device, rpc::MigrationStats::Builder stats) {
    unsigned moving = 0;
    std::string from;
    for (unsigned u = range.first; u <= range.last; u++) {
      if (m.device[u] == device) continue;
      moving++;
      if (("," + from + ",").find("," + m.device[u] + ",") == std::string::npos) {
        from += (from.empty() ? "" : ",") + m.device[u];
      }
    }
    stats.setModel(m.name);
    stats.setFirstName(unitName(range.first));
    stats.setLastName(unitName(range.last));
    stats.setFrom(from);
    stats.setTo(device);
    stats.setUnits(moving);
    stats.setWeightBytes(moving * kUnitWeightBytes);
    if (moving > 0) stats.setId(nextMigration_++);
    return moving;
  }

  // Marks a generation cancelled if it is destroyed before it completed.
  struct GenerationWatch {
    GenerationWatch(FakeDaemonServer* server, std::string model, uint64_t session)
        : server(server), model(std::move(model)), session(session) {}
    GenerationWatch(const GenerationWatch&) = delete;  // one per generation: its destructor counts
    GenerationWatch& operator=(const GenerationWatch&) = delete;
    ~GenerationWatch() {
      if (FakeModel* m = server->findModel(model)) m->sessions.erase(session);
      update(server->shared_,
             [&](FakeDaemonRecord& r) { (completed ? r.generationsCompleted : r.generationsCancelled)++; });
    }

    FakeDaemonServer* server;
    std::string model;
    uint64_t session;
    bool completed = false;
  };

  template <typename Context>
  kj::Promise<void> reply(Context context, const std::string& model, std::vector<std::string> pieces,
                          uint32_t promptTokens) {
    context.allowCancellation();  // capnp 0.9: without it a dropped call keeps running
    auto sink = context.getParams().getSink();
    const uint64_t session = nextSession_++;
    if (FakeModel* m = findModel(model)) m->sessions[session] = 0;
    auto watch = kj::heap<GenerationWatch>(this, model, session);
    auto* w = watch.get();
    kj::Promise<void> sent = kj::READY_NOW;
    for (size_t i = 0; i < pieces.size(); i++) {
      sent = sent.then([this, sink, piece = pieces[i], i, model, session]() mutable -> kj::Promise<void> {
        if (model == "hangup" && i == 2) {
          // Give the two tokens sent time to leave before every connection closes.
          return timer_.afterDelay(100 * kj::MILLISECONDS).then([this]() -> kj::Promise<void> {
            hangup_.fulfill();
            return kj::NEVER_DONE;
          });
        }
        if (FakeModel* m = findModel(model)) m->sessions[session] = uint32_t(i + 1);
        auto req = sink.tokensRequest();
        req.initIds(1).set(0, int32_t(100 + i));
        req.setText(piece);
        // Each chunk waits for the client's answer (the contract's flow control, at its tightest).
        const auto sentAt = std::chrono::steady_clock::now();
        kj::Promise<void> delivered = req.send().ignoreResult().then([this, sentAt]() {
          const std::chrono::duration<double, std::milli> answered = std::chrono::steady_clock::now() - sentAt;
          update(shared_, [&](FakeDaemonRecord& r) { r.chunkAnswerMs.push_back(answered.count()); });
        });
        if (options_.tokenDelay.count() == 0) return delivered;
        return delivered.then([this]() { return timer_.afterDelay(options_.tokenDelay.count() * kj::MILLISECONDS); });
      });
    }
    return sent
        .then([this, context, pieces, promptTokens, session, w]() mutable {
          auto results = context.getResults();
          auto ids = results.initTokens(unsigned(pieces.size()));
          std::string text;
          for (size_t i = 0; i < pieces.size(); i++) {
            ids.set(unsigned(i), int32_t(100 + i));
            text += pieces[i];
          }
          results.setText(text);
          auto stats = results.initStats();
          stats.setPromptTokens(promptTokens);
          stats.setGeneratedTokens(uint32_t(pieces.size()));
          stats.setTimeToFirstTokenMs(1.5);
          stats.setTokensPerSecond(1000);
          stats.setTotalMs(2.5);
          stats.setStopReason(rpc::StopReason::MAX_TOKENS);
          stats.setSessionId(session);
          w->completed = true;
        })
        .attach(kj::mv(watch));
  }

  void fill(rpc::ModelInfo::Builder out, const FakeModel& m) {
    out.setName(m.name);
    out.setPath(m.path);
    out.setArchitecture("llama");
    out.setFileBytes(1185376);
    out.setLayers(5);
    out.setVocabSize(512);
    out.setContextLength(2048);
    out.setContextSize(2048);
    std::vector<std::pair<unsigned, unsigned>> runs;  // consecutive units on one device
    for (unsigned u = 0; u < kUnits; u++) {
      if (runs.empty() || m.device[u] != m.device[runs.back().first]) runs.push_back({u, u});
      runs.back().second = u;
    }
    auto placement = out.initPlacement(unsigned(runs.size()));
    for (unsigned i = 0; i < runs.size(); i++) {
      placement[i].setFirst(runs[i].first);
      placement[i].setLast(runs[i].second);
      placement[i].setDevice(m.device[runs[i].first]);
      placement[i].setFirstName(unitName(runs[i].first));
      placement[i].setLastName(unitName(runs[i].second));
    }
    auto memory = out.initMemory(1);
    memory[0].setDevice("cpu:0");
    memory[0].setWeightBytes(1 << 20);
    memory[0].setKvBytes(0);
    auto sessions = out.initSessions(unsigned(m.sessions.size()));
    unsigned i = 0;
    for (const auto& [id, tokens] : m.sessions) {
      sessions[i].setId(id);
      sessions[i].setOwnerUid(::getuid());
      sessions[i].setTokens(tokens);
      sessions[i].setContextLimit(2048);
      sessions[i].setState("decode");
      i++;
    }
    out.setChatTemplate("llama2");
    out.setLoadedUnixMs(1700000000000);
    auto layers = out.initLayerStates(kUnits);
    for (unsigned u = 0; u < kUnits; u++) {
      auto l = layers[u];
      l.setUnit(u);
      l.setName(unitName(u));
      l.setDevice(m.device[u]);
      l.setResidency(u == 0 ? "file" : "device");  // the embedding table is read in place
      l.setStagedOn(m.stagedOn[u]);
      l.setWeightBytes(kUnitWeightBytes);
      l.setKernelsReady(u != 0);  // a lookup needs no compiled kernel
      l.setPinned(m.pinned[u]);
      const bool block = u > 0 && u < kUnits - 1;
      auto pages = l.initSessions(block ? unsigned(m.sessions.size()) : 0);
      uint32_t total = 0;
      unsigned i = 0;
      for (const auto& [id, tokens] : m.sessions) {
        if (!block) break;
        const uint32_t n = (tokens + kTokensPerPage - 1) / kTokensPerPage;
        pages[i].setSessionId(id);
        pages[i].setPages(n);
        total += n;
        i++;
      }
      l.setKvPages(total);
      l.setKvBytes(total * kPageBytes);
    }
    out.setMigration(m.migration);
  }

  void emit(StoredEvent e) {
    history_.push_back(e);
    for (auto& sink : subscribers_) tasks_.add(send(sink, history_.back()));
  }

  kj::Promise<void> send(rpc::EventSink::Client sink, const StoredEvent& e) {
    auto req = sink.eventRequest();
    auto ev = req.initEvent();
    ev.setUnixMs(1700000000000 + int64_t(history_.size()));
    ev.setKind(e.kind);
    ev.setWhat(e.what);
    ev.setModel(e.model);
    ev.setDevice(e.device);
    ev.setSessionId(e.sessionId);
    ev.setMessage(e.message);
    return req.send();
  }

  Shared& shared_;
  kj::Timer& timer_;
  FakeDaemon::Options options_;
  kj::PromiseFulfiller<void>& hangup_;
  std::vector<FakeModel> models_;
  std::vector<StoredEvent> history_ = {{rpc::EventKind::DAEMON, "started", "", "fake daemon started"}};
  std::list<rpc::EventSink::Client> subscribers_;
  uint64_t nextSession_ = 1;
  uint64_t nextMigration_ = 1;
  kj::TaskSet tasks_;
};

SubscriptionServer::~SubscriptionServer() { daemon_.unsubscribe(it_); }

}  // namespace

struct FakeDaemon::Control {
  std::promise<void> ready;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop;
  std::string error;
};

FakeDaemon::FakeDaemon(std::string socketPath, Options options)
    : socketPath_(std::move(socketPath)), options_(options), control_(std::make_unique<Control>()) {
  auto ready = control_->ready.get_future();
  thread_ = std::thread([this] { serve(); });
  ready.wait();
  if (!control_->error.empty()) {
    thread_.join();
    throw std::runtime_error(control_->error);
  }
}

FakeDaemon::~FakeDaemon() {
  control_->stop->fulfill();
  thread_.join();
}

FakeDaemonRecord FakeDaemon::record() const {
  std::lock_guard lock(state_->mutex);
  return state_->record;
}

void FakeDaemon::serve() {
  auto io = kj::setupAsyncIo();
  auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
  control_->stop = kj::mv(stop.fulfiller);
  auto hangup = kj::newPromiseAndFulfiller<void>();

  ::unlink(socketPath_.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socketPath_.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    control_->error = "fake daemon cannot listen on " + socketPath_ + ": " + std::strerror(errno);
    ::close(fd);
    control_->ready.set_value();
    return;
  }
  auto listener = io.lowLevelProvider->wrapListenSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  auto stopped = stop.promise.fork();
  {
    capnp::TwoPartyServer server(
        kj::heap<FakeDaemonServer>(*state_, io.provider->getTimer(), options_, *hangup.fulfiller));
    auto listening = server.listenCapStreamReceiver(*listener, 1);
    control_->ready.set_value();
    stopped.addBranch().exclusiveJoin(kj::mv(hangup.promise)).exclusiveJoin(kj::mv(listening)).wait(io.waitScope);
  }  // every connection closes here
  ::unlink(socketPath_.c_str());
  // After a hangup the loop stays until the destructor's stop, which needs it to fulfill.
  stopped.addBranch().wait(io.waitScope);
}

}  // namespace jitllm::testing
