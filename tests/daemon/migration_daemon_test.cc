// Live migration end to end: jitllmd with two CPU devices moves a model's layers while replies
// stream to slow readers; the replies must be token for token those of an undisturbed run.
#include <gtest/gtest.h>

#include "tests/daemon/daemon_calls.h"

namespace jitllm::testing {
namespace {

// Every reply generates at the pace its reader takes it: two unsent tokens throttle a session.
std::unique_ptr<DaemonProcess> startTwoCpuDaemon() {
  const auto config =
      std::filesystem::temp_directory_path() / ("jitllmd-migrate-" + std::to_string(::getpid()) + ".conf");
  std::ofstream(config) << "max_queued_tokens = 2\n";
  auto d = std::make_unique<DaemonProcess>(
      std::vector<std::string>{"--devices", "cpu:0,cpu:1", "--config", config.string()});
  std::filesystem::remove(config);
  return d;
}

struct Migrated {
  std::string error;
  uint32_t units = 0, sessions = 0, recomputed = 0;
  bool committed = false;
  double pauseMs = 0, prepareMs = 0;
  uint64_t precopied = 0, inPause = 0;
  std::string from, to;
};

// One call that answers MigrationStats: migrate, or tensorParallel (`split` not empty).
Migrated migrate(kj::AsyncIoContext& io, RpcConnection& c, const std::string& layers, const std::string& device,
                 bool force = false, const std::vector<std::string>& split = {}) {
  auto read = [&](auto&& req) {
    auto r = req.initRequest();
    r.setModel("stories");
    r.setLayers(layers);
    r.setDevice(device);
    r.setForce(force);
    auto list = r.initSplit(unsigned(split.size()));
    for (size_t i = 0; i < split.size(); i++) list.set(unsigned(i), split[i]);
    Migrated out;
    try {
      auto response = req.send().wait(io.waitScope);  // the readers below point into it
      auto s = response.getStats();
      out.units = s.getUnits();
      out.sessions = s.getSessions();
      out.recomputed = s.getRecomputedTokens();
      out.committed = s.getCommitted();
      out.pauseMs = s.getPauseMs();
      out.prepareMs = s.getPrepareMs();
      out.precopied = s.getBytesPrecopied();
      out.inPause = s.getBytesInPause();
      out.from = s.getFrom();
      out.to = s.getTo();
    } catch (const kj::Exception& e) {
      out.error = e.getDescription().cStr();
    }
    return out;
  };
  return split.empty() ? read(c.daemon().migrateRequest()) : read(c.daemon().tensorParallelRequest());
}

// Per unit: (device, pinned).
std::vector<std::pair<std::string, std::string>> units(kj::AsyncIoContext& io, RpcConnection& c) {
  auto resp = c.daemon().modelsRequest().send().wait(io.waitScope);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto l : resp.getModels()[0].getLayerStates()) out.emplace_back(l.getDevice(), l.getPinned());
  return out;
}

const std::vector<std::string> kPrompts = {"Once upon a time", "Lily wanted to", "The little dog"};

// A reply to each of kPrompts streaming to a slow reader of its own (8 ms a token).
struct StreamingReplies {
  std::vector<std::unique_ptr<RpcConnection>> readers;
  std::vector<std::shared_ptr<CollectingSink::State>> states;
  std::vector<kj::Promise<GenerateResult>> replies;

  StreamingReplies(kj::AsyncIoContext& io, DaemonProcess& d, int tokens) {
    for (const auto& p : kPrompts) {
      readers.push_back(std::make_unique<RpcConnection>(io, d.socket()));
      states.push_back(std::make_shared<CollectingSink::State>());
      replies.push_back(
          generate(*readers.back(), p, tokens, states.back(), &io.provider->getTimer(), 8 * kj::MILLISECONDS));
    }
  }
  // Until every reply has `n` tokens (a failure after a generous bound).
  void waitForTokens(kj::AsyncIoContext& io, size_t n) {
    for (int i = 0; i < 2000; i++) {
      bool all = true;
      for (const auto& s : states) all = all && s->ids.size() >= n;
      if (all) return;
      io.provider->getTimer().afterDelay(2 * kj::MILLISECONDS).wait(io.waitScope);
    }
    ADD_FAILURE() << "the replies did not reach " << n << " tokens";
  }
};

TEST(DaemonMigration, LayersMoveWhileRepliesStreamAndNoReplyChangesByOneToken) {
  auto d = startTwoCpuDaemon();
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  auto seen = std::make_shared<std::vector<std::string>>();
  auto sub = c.daemon().eventsRequest();
  sub.setSink(kj::heap<EventCollector>(seen));
  auto subscription = sub.send().wait(io.waitScope).getSubscription();
  loadStories(io, c, "stories", "cpu:0");
  for (const auto& [device, pin] : units(io, c)) EXPECT_EQ(device, "cpu:0");

  std::vector<GenerateResult> undisturbed;
  for (const auto& p : kPrompts) undisturbed.push_back(generate(c, p, 120).wait(io.waitScope));

  StreamingReplies streaming(io, *d, 120);
  auto& replies = streaming.replies;
  // Migrate at about token 20, 40 and 60 of the replies.
  auto waitForTokens = [&](size_t n) { streaming.waitForTokens(io, n); };
  waitForTokens(20);
  const Migrated there = migrate(io, c, "", "cpu:1");
  waitForTokens(40);
  const Migrated back = migrate(io, c, "", "cpu:0");
  waitForTokens(60);
  const Migrated part = migrate(io, c, "1-2", "cpu:1");
  for (size_t i = 0; i < replies.size(); i++) {
    const GenerateResult r = replies[i].wait(io.waitScope);
    EXPECT_EQ(r.ids, undisturbed[i].ids) << kPrompts[i];
    EXPECT_EQ(r.streamedText, undisturbed[i].text) << kPrompts[i];
  }
  for (const Migrated* m : {&there, &back, &part}) {
    EXPECT_EQ(m->error, "");
    EXPECT_TRUE(m->committed);
    EXPECT_EQ(m->recomputed, 0u);
    // The three replies streaming, and the three idle sessions the undisturbed run left (kept for
    // a follow-up, their KV moves with their layers).
    EXPECT_EQ(m->sessions, 6u) << "the migration happened while the three replies streamed";
    EXPECT_GT(m->pauseMs, 0);
    EXPECT_GT(m->precopied, 0u);
  }
  EXPECT_EQ(there.units, 7u);
  EXPECT_EQ(there.from, "cpu:0");
  EXPECT_EQ(there.to, "cpu:1");
  EXPECT_EQ(back.units, 7u);
  EXPECT_EQ(part.units, 2u);
  const auto placed = units(io, c);
  ASSERT_EQ(placed.size(), 7u);
  for (size_t u = 0; u < placed.size(); u++) EXPECT_EQ(placed[u].first, u == 2 || u == 3 ? "cpu:1" : "cpu:0") << u;
  EXPECT_TRUE(becomesIdle(io, c));
  auto count = [&](const std::string& what) { return std::count(seen->begin(), seen->end(), what + " stories"); };
  for (int i = 0; i < 200 && count("migration.committed") < 3; i++) {
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
  EXPECT_EQ(count("migration.preparing"), 3);
  EXPECT_EQ(count("migration.prepared"), 3);
  EXPECT_EQ(count("migration.committed"), 3);
}

TEST(DaemonMigration, PinnedLayersStayUnlessForcedAndBadRequestsAreClearErrors) {
  auto d = startTwoCpuDaemon();
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  loadStories(io, c, "stories", "cpu:0");

  auto pin = c.daemon().pinRequest();
  pin.setModel("stories");
  pin.setLayers("0-1");
  pin.setDevice("cpu:1");
  auto pinResponse = pin.send().wait(io.waitScope);
  auto pinned = pinResponse.getStats();
  EXPECT_EQ(pinned.getUnits(), 2u);
  EXPECT_TRUE(pinned.getCommitted());
  auto placed = units(io, c);
  EXPECT_EQ(placed[1], std::make_pair(std::string("cpu:1"), std::string("cpu:1")));
  EXPECT_EQ(placed[2], std::make_pair(std::string("cpu:1"), std::string("cpu:1")));
  EXPECT_EQ(placed[3], std::make_pair(std::string("cpu:0"), std::string()));

  const Migrated refused = migrate(io, c, "", "cpu:0");
  EXPECT_NE(refused.error.find("blk.0 of 'stories' is pinned to cpu:1"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("--force"), std::string::npos) << refused.error;
  EXPECT_EQ(units(io, c)[1].first, "cpu:1") << "a refused migration moves nothing";
  // Outside the pinned range nothing is refused.
  EXPECT_EQ(migrate(io, c, "2-output", "cpu:1").error, "");

  const Migrated forced = migrate(io, c, "", "cpu:0", true);
  EXPECT_EQ(forced.error, "");
  EXPECT_EQ(forced.units, 6u) << "token_embd was on cpu:0 already";
  placed = units(io, c);
  EXPECT_EQ(placed[1], std::make_pair(std::string("cpu:0"), std::string("cpu:0"))) << "the pin follows a forced move";

  auto unpin = c.daemon().unpinRequest();
  unpin.setModel("stories");
  unpin.setLayers("0-1");
  unpin.send().wait(io.waitScope);
  for (const auto& [device, pinnedTo] : units(io, c)) EXPECT_EQ(pinnedTo, "");

  EXPECT_NE(migrate(io, c, "", "cuda:7").error.find("no device 'cuda:7'"), std::string::npos);
  EXPECT_NE(migrate(io, c, "9", "cpu:1").error.find("layer 9 does not exist"), std::string::npos);
  EXPECT_NE(migrate(io, c, "3-1", "cpu:1").error.find("runs backwards"), std::string::npos);
  // The daemon still serves, and the model still generates.
  EXPECT_EQ(generate(c, "Once upon a time", 10).wait(io.waitScope).ids.size(), 10u);
}

// Every finished reply leaves an idle session; a migration or pin that moves no transformer block
// - the model already on the target, the head, the embedding - must commit as what it is (no KV
// to move) and the daemon serve on. These once aborted jitllmd (std::out_of_range).
TEST(DaemonMigration, MigrationsAndPinsThatMoveNoBlockCommitWithIdleSessionsAndTheDaemonServesOn) {
  auto d = startTwoCpuDaemon();
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  loadStories(io, c, "stories", "cpu:0");
  const GenerateResult before = generate(c, "Once upon a time", 12).wait(io.waitScope);
  ASSERT_EQ(before.ids.size(), 12u);

  const Migrated nothing = migrate(io, c, "", "cpu:0");
  EXPECT_EQ(nothing.error, "");
  EXPECT_TRUE(nothing.committed);
  EXPECT_EQ(nothing.units, 0u);
  EXPECT_EQ(nothing.sessions, 0u);
  const Migrated head = migrate(io, c, "output", "cpu:1");
  EXPECT_EQ(head.error, "");
  EXPECT_EQ(head.units, 1u);
  auto pin = c.daemon().pinRequest();
  pin.setModel("stories");
  pin.setLayers("token_embd");
  pin.setDevice("cpu:1");
  EXPECT_EQ(pin.send().wait(io.waitScope).getStats().getUnits(), 1u);
  auto again = c.daemon().pinRequest();
  again.setModel("stories");
  again.setLayers("token_embd");
  again.setDevice("cpu:1");
  auto repinned = again.send().wait(io.waitScope);  // the stats below read into it
  EXPECT_TRUE(repinned.getStats().getCommitted());
  EXPECT_EQ(repinned.getStats().getUnits(), 0u) << "pinned where it is: nothing moves";
  // Two admins alternating whole-model migrations, idle sessions all along.
  for (int i = 0; i < 6; i++) {
    const Migrated m = migrate(io, c, "1-4", i % 2 ? "cpu:0" : "cpu:1");
    EXPECT_EQ(m.error, "") << i;
    EXPECT_EQ(generate(c, "Lily wanted to", 4).wait(io.waitScope).ids.size(), 4u) << i;
  }
  // Still serving, and the same reply as before anything moved.
  EXPECT_EQ(generate(c, "Once upon a time", 12).wait(io.waitScope).ids, before.ids);
  EXPECT_TRUE(d->running()) << d->log();
}

TEST(DaemonMigration, ASecondMigrationOfAModelWhileOneRunsIsRefused) {
  auto d = startTwoCpuDaemon();
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  loadStories(io, c, "stories", "cpu:0");
  // Two requests sent back to back: the second reaches the daemon while the first prepares,
  // unless the first was quicker than one message - so try until it does not (a loaded 2-core
  // machine schedules the worker at once more often than not: many tries, a few ms each).
  int refusals = 0;
  for (int attempt = 0; attempt < 200 && refusals == 0; attempt++) {
    auto first = c.daemon().migrateRequest();
    first.initRequest().setModel("stories");
    first.getRequest().setDevice(attempt % 2 ? "cpu:0" : "cpu:1");
    auto second = c.daemon().migrateRequest();
    second.initRequest().setModel("stories");
    second.getRequest().setDevice(attempt % 2 ? "cpu:0" : "cpu:1");
    auto a = first.send();
    auto b = second.send();
    a.wait(io.waitScope);
    try {
      b.wait(io.waitScope);
    } catch (const kj::Exception& e) {
      EXPECT_NE(std::string(e.getDescription().cStr()).find("is already migrating"), std::string::npos)
          << e.getDescription().cStr();
      refusals++;
    }
  }
  EXPECT_GT(refusals, 0);
  EXPECT_EQ(generate(c, "Once upon a time", 10).wait(io.waitScope).ids.size(), 10u);
}

}  // namespace
}  // namespace jitllm::testing

namespace jitllm::testing {
namespace {

// The scheduler end to end: jitllmd's thermal policy with scripted telemetry moves a model off a
// "hot" cpu:0 and back once it has cooled, and says why in its events.
TEST(DaemonScheduler, AHotDeviceLosesItsLayersAndGetsThemBackWithScriptedTelemetry) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllmd-sched-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "telemetry") << "0 cpu:0 temp=60\n3000 cpu:0 temp=95\n6000 cpu:0 temp=60\n";
  std::ofstream(dir / "jitllmd.conf") << "policy = thermal\nthermal_cool_for_ms = 500\n";
  DaemonProcess d({"--devices", "cpu:0,cpu:1", "--config", (dir / "jitllmd.conf").string(), "--telemetry-script",
                   (dir / "telemetry").string(), "--scheduler-interval-ms", "100"});
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c, "stories", "cpu:0");
  auto placementIs = [&](const std::string& device) {
    const auto deadline = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(60));
    while (std::chrono::steady_clock::now() < deadline) {
      auto resp = c.daemon().modelsRequest().send().wait(io.waitScope);
      bool all = true;
      for (auto l : resp.getModels()[0].getLayerStates()) all = all && l.getDevice() == device;
      if (all) return true;
      io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
    }
    return false;
  };
  EXPECT_TRUE(placementIs("cpu:1")) << d.log();
  EXPECT_TRUE(placementIs("cpu:0")) << d.log();
  const std::string log = d.log();
  EXPECT_NE(log.find("scheduler.acted"), std::string::npos) << log;
  EXPECT_NE(log.find("cpu:0 at 95 °C > 85 °C"), std::string::npos) << log;
  EXPECT_NE(log.find("cpu:0 back below 75 °C"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

TEST(DaemonScheduler, ThePolicyIsShownSwitchedAtRunTimeAndUnknownNamesAreRefused) {
  DaemonProcess d;
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  auto ask = [&](const std::string& name) {
    auto req = c.daemon().policyRequest();
    req.setName(name);
    auto resp = req.send().wait(io.waitScope);
    std::string all;
    for (auto n : resp.getAvailable()) all += std::string(n.cStr()) + " ";
    return std::string(resp.getName().cStr()) + " / " + all;
  };
  EXPECT_EQ(ask(""), "balanced / balanced thermal slo pressure online ");
  EXPECT_EQ(ask("thermal"), "thermal / balanced thermal slo pressure online ");
  EXPECT_EQ(ask(""), "thermal / balanced thermal slo pressure online ");
  auto bad = c.daemon().policyRequest();
  bad.setName("fastest");
  EXPECT_NE(errorOf(bad.send().ignoreResult(), io.waitScope).find("no policy 'fastest'; there are balanced, thermal"),
            std::string::npos);
  EXPECT_EQ(ask(""), "thermal / balanced thermal slo pressure online ") << "a refused switch changes nothing";
  EXPECT_NE(d.log().find("scheduler.policy"), std::string::npos);
}

// Tensor parallelism through the daemon: the blocks split over cpu:0 and cpu:1 while replies
// stream, then join back onto cpu:0; every reply keeps every token, none is recomputed.
TEST(DaemonMigration, BlocksSplitOverTwoDevicesMidReplyAndJoinBackWithoutChangingAToken) {
  auto d = startTwoCpuDaemon();
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  loadStories(io, c, "stories", "cpu:0");
  std::vector<GenerateResult> undisturbed;
  for (const auto& p : kPrompts) undisturbed.push_back(generate(c, p, 100).wait(io.waitScope));

  StreamingReplies streaming(io, *d, 100);
  auto& replies = streaming.replies;
  auto waitForTokens = [&](size_t n) { streaming.waitForTokens(io, n); };
  waitForTokens(20);
  const Migrated split = migrate(io, c, "", "", false, {"cpu:0", "cpu:1"});
  const auto during = units(io, c);
  waitForTokens(50);
  const Migrated joined = migrate(io, c, "", "", false, {"cpu:0"});
  for (size_t i = 0; i < replies.size(); i++) {
    const GenerateResult r = replies[i].wait(io.waitScope);
    EXPECT_EQ(r.ids, undisturbed[i].ids) << kPrompts[i];
  }
  for (const Migrated* m : {&split, &joined}) {
    EXPECT_EQ(m->error, "");
    EXPECT_TRUE(m->committed);
    EXPECT_EQ(m->recomputed, 0u);
    EXPECT_EQ(m->units, 5u) << "stories260K's five blocks; the embedding and head stay";
    EXPECT_GE(m->sessions, 3u);
  }
  EXPECT_EQ(split.from, "cpu:0");
  EXPECT_EQ(split.to, "cpu:0+cpu:1");
  EXPECT_EQ(joined.to, "cpu:0");
  ASSERT_EQ(during.size(), 7u);
  EXPECT_EQ(during[0].first, "cpu:0");
  EXPECT_EQ(during[1].first, "cpu:0+cpu:1");
  EXPECT_EQ(during[6].first, "cpu:0");
  for (const auto& [device, pin] : units(io, c)) EXPECT_EQ(device, "cpu:0");

  // What does not split is refused by name, and the model serves on.
  const Migrated three = migrate(io, c, "", "", false, {"cpu:0", "cpu:1", "cpu:1"});
  EXPECT_NE(three.error.find("twice"), std::string::npos) << three.error;
  EXPECT_EQ(generate(c, kPrompts[0], 100).wait(io.waitScope).ids, undisturbed[0].ids);
}

// Data parallelism: a replica of stories on cpu:1 takes a share of the requests for stories (the
// copy with the fewer jobs gets the next one), every reply the one a single copy gives; the
// replica goes with its model, and replicating onto the model's own device is refused.
TEST(DaemonMigration, AReplicaOnTheSecondDeviceSharesTheRequestsAndGoesWithItsModel) {
  auto d = startTwoCpuDaemon();
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  loadStories(io, c, "stories", "cpu:0");
  std::vector<GenerateResult> alone;
  for (const auto& p : kPrompts) alone.push_back(generate(c, p, 60).wait(io.waitScope));

  auto replicate = [&](const std::string& model, const std::string& device) -> std::string {
    auto req = c.daemon().replicateRequest();
    req.setModel(model);
    req.setDevice(device);
    try {
      return req.send().wait(io.waitScope).getModel().getName().cStr();
    } catch (const kj::Exception& e) {
      return std::string("error: ") + e.getDescription().cStr();
    }
  };
  EXPECT_EQ(replicate("stories", "cpu:1"), "stories#2");
  EXPECT_NE(replicate("stories", "cpu:0").find("runs on cpu:0 already"), std::string::npos);
  EXPECT_NE(replicate("stories#2", "cpu:0").find("is a replica of 'stories'"), std::string::npos);

  auto seen = std::make_shared<std::vector<std::string>>();
  auto sub = c.daemon().eventsRequest();
  sub.setSink(kj::heap<EventCollector>(seen));
  auto subscription = sub.send().wait(io.waitScope).getSubscription();
  StreamingReplies streaming(io, *d, 60);  // three at once: the copies take turns
  for (size_t i = 0; i < streaming.replies.size(); i++) {
    EXPECT_EQ(streaming.replies[i].wait(io.waitScope).ids, alone[i].ids) << kPrompts[i];
  }
  io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS).wait(io.waitScope);  // the last events
  int onModel = 0, onReplica = 0;
  for (const auto& e : *seen) {
    onModel += e == "session.finished stories";
    onReplica += e == "session.finished stories#2";
  }
  EXPECT_EQ(onModel + onReplica, 3);
  EXPECT_GE(onReplica, 1) << "the replica served none of three replies at once";
  EXPECT_GE(onModel, 1);

  auto unload = c.daemon().unloadRequest();
  unload.setName("stories");
  unload.send().wait(io.waitScope);
  auto models = c.daemon().modelsRequest().send().wait(io.waitScope);
  EXPECT_EQ(models.getModels().size(), 0u) << "the replica went with its model";
}

}  // namespace
}  // namespace jitllm::testing
