// Service tiers (daemon/server/service_tier.h): the names on every API, the config keys, who may
// ask for which tier, what "met its targets" means, and a model's worker running an interactive
// reply first and counting each tier's goodput.
#include "daemon/server/service_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "daemon/server/daemon_config.h"
#include "daemon/server/tier_goodput.h"
#include "engine/kv/kv_page_pool.h"
#include "tests/daemon/core_harness.h"

namespace jitllm::server {
namespace {

TEST(ServiceTier, NamesRoundTripAndOpenAisNamesMapOntoTheTiers) {
  for (ServiceTier t : kAllServiceTiers) {
    EXPECT_EQ(parseTier(tierName(t)), t);
    EXPECT_EQ(tierFromOpenAi(openAiTierName(t)), t);
  }
  EXPECT_EQ(tierFromOpenAi("priority"), ServiceTier::kInteractive);
  EXPECT_EQ(tierFromOpenAi("auto"), ServiceTier::kStandard);
  EXPECT_EQ(tierFromOpenAi("flex"), ServiceTier::kBatch);
  EXPECT_FALSE(tierFromOpenAi("scale"));
  EXPECT_FALSE(parseTier("Interactive"));
  EXPECT_FALSE(parseTier(""));
}

TEST(ServiceTier, TargetsAreMetOnlyWhenTtftAndTimePerTokenBothHold) {
  const TierTargets t{200, 50};
  EXPECT_TRUE(metTargets(t, 150, 10, 25));         // 40 ms a token
  EXPECT_FALSE(metTargets(t, 250, 10, 25));        // late first token
  EXPECT_FALSE(metTargets(t, 150, 10, 10));        // 100 ms a token
  EXPECT_TRUE(metTargets(t, 150, 1, 0));           // one token: no time per token to judge
  EXPECT_FALSE(metTargets(t, 150, 0, 0));          // nothing came
  EXPECT_TRUE(metTargets({0, 0}, 1e9, 5, 0.001));  // batch: no targets
}

TEST(ServiceTier, ConfigSetsTargetsDefaultsAndPerUserAndGroupTiers) {
  DaemonConfig c;
  EXPECT_EQ(c.tiers.targetsOf(ServiceTier::kInteractive), (TierTargets{200, 50}));
  EXPECT_EQ(c.tiers.targetsOf(ServiceTier::kStandard), (TierTargets{1000, 100}));
  EXPECT_EQ(c.tiers.targetsOf(ServiceTier::kBatch), (TierTargets{0, 0}));
  c.parse(R"(tier_interactive_ttft_ms = 150
tier_interactive_tpot_ms = 40
tier_batch_tpot_ms = 500
tier_default = batch
tier_users = alice:interactive, bob : standard
tier_groups = chat:interactive
tier_scheduling = off
)",
          "tiers.conf");
  EXPECT_EQ(c.tiers.targetsOf(ServiceTier::kInteractive), (TierTargets{150, 40}));
  EXPECT_EQ(c.tiers.targetsOf(ServiceTier::kBatch), (TierTargets{0, 500}));
  EXPECT_EQ(c.tiers.defaultTier, ServiceTier::kBatch);
  ASSERT_EQ(c.tiers.users.size(), 2u);
  EXPECT_EQ(c.tiers.users[1], (std::pair<std::string, ServiceTier>{"bob", ServiceTier::kStandard}));
  ASSERT_EQ(c.tiers.groups.size(), 1u);
  EXPECT_FALSE(c.tiers.scheduling);
  for (const char* bad : {"tier_default = urgent", "tier_users = alice", "tier_users = alice:fast",
                          "tier_groups = :batch", "tier_standard_ttft_ms = -1", "tier_fast_ttft_ms = 5"}) {
    DaemonConfig d;
    EXPECT_THROW(d.parse(bad, "bad.conf"), Error) << bad;
  }
}

TEST(ServiceTier, OnlyAdminsAskForATierMoreUrgentThanTheirDefault) {
  TierConfig tiers;  // default: standard
  const uid_t nobody = 65534;
  EXPECT_EQ(resolveTier(tiers, std::nullopt, nobody, {}, false), ServiceTier::kStandard);
  EXPECT_EQ(resolveTier(tiers, ServiceTier::kBatch, nobody, {}, false), ServiceTier::kBatch);
  try {
    resolveTier(tiers, ServiceTier::kInteractive, nobody, {}, false);
    ADD_FAILURE() << "a non-admin raised their tier";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("permission denied"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("interactive"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolveTier(tiers, ServiceTier::kInteractive, nobody, {}, true), ServiceTier::kInteractive);
  // root's entry by name, and a group's (gid 0 is root's group on every Linux).
  tiers.users = {{"root", ServiceTier::kBatch}};
  EXPECT_EQ(defaultTierOf(tiers, 0, {0}), ServiceTier::kBatch);
  tiers.users.clear();
  tiers.groups = {{"root", ServiceTier::kInteractive}};
  EXPECT_EQ(defaultTierOf(tiers, 12345, {0}), ServiceTier::kInteractive);
  EXPECT_EQ(resolveTier(tiers, ServiceTier::kInteractive, 12345, {0}, false), ServiceTier::kInteractive);
  EXPECT_EQ(defaultTierOf(tiers, 12345, {}), ServiceTier::kStandard);
}

// Goodput is the met replies of the last minute per second; the counts are since the load.
TEST(ServiceTierGoodput, TheCounterKeepsAMinuteOfMetRepliesAndCountsSinceTheLoad) {
  TierGoodputCounter c;
  const auto t0 = TierGoodputCounter::Clock::time_point{} + std::chrono::hours(1);
  c.record(ServiceTier::kInteractive, true, t0);
  c.record(ServiceTier::kInteractive, false, t0);
  c.record(ServiceTier::kInteractive, true, t0 + std::chrono::seconds(30));
  c.record(ServiceTier::kBatch, true, t0);
  const TierConfig tiers;
  auto g = c.snapshot(tiers, t0 + std::chrono::seconds(30));
  ASSERT_EQ(g.size(), kServiceTiers);
  EXPECT_EQ(g[0].tier, ServiceTier::kInteractive);
  EXPECT_EQ(g[0].finished, 3u);
  EXPECT_EQ(g[0].met, 2u);
  EXPECT_DOUBLE_EQ(g[0].metPerSecond, 2.0 / 60);
  EXPECT_EQ(g[0].targets.tpotMs, tiers.targetsOf(ServiceTier::kInteractive).tpotMs);
  // 70 s after the first: only the second met reply is in the window; the counts stay.
  c.expire(t0 + std::chrono::seconds(70));
  g = c.snapshot(tiers, t0 + std::chrono::seconds(70));
  EXPECT_DOUBLE_EQ(g[0].metPerSecond, 1.0 / 60);
  EXPECT_EQ(g[0].met, 2u);
  EXPECT_DOUBLE_EQ(g[2].metPerSecond, 0);
  EXPECT_EQ(g[2].met, 1u);
}

}  // namespace
}  // namespace jitllm::server

namespace jitllm::scheduler {
namespace {

// A reply in each tier on a real model worker: each is counted under its tier, with its targets;
// targets no reply can meet (a microsecond) are missed, none at all are met.
TEST(ServiceTierGoodput, EachTiersRepliesAreCountedAgainstItsTargets) {
  auto core = makeCore("cpu:0", 0);
  auto host = load(*core, "tiers", "cpu:0");
  server::TierConfig tiers;
  tiers.targets[size_t(server::ServiceTier::kInteractive)] = {0.001, 0.001};
  tiers.targets[size_t(server::ServiceTier::kStandard)] = {0, 0};
  host->setTiers(tiers);
  for (server::ServiceTier t : {server::ServiceTier::kInteractive, server::ServiceTier::kStandard}) {
    server::GenerationRequest r;
    r.prompt = host->model().tokenizer().encode("Once upon a time", true, false);
    r.maxTokens = 6;
    r.tier = t;
    auto job = std::make_shared<server::GenerationJob>(r, 64);
    host->submit(job);
    const Outcome out = finish(*job);
    ASSERT_FALSE(out.error);
    EXPECT_EQ(out.stats.tier, t);
    EXPECT_EQ(out.stats.metTargets, t == server::ServiceTier::kStandard);
  }
  const auto snap = host->snapshot();
  ASSERT_EQ(snap.goodput.size(), server::kServiceTiers);
  EXPECT_EQ(snap.goodput[0].tier, server::ServiceTier::kInteractive);
  EXPECT_EQ(snap.goodput[0].finished, 1u);
  EXPECT_EQ(snap.goodput[0].met, 0u);
  EXPECT_EQ(snap.goodput[1].finished, 1u);
  EXPECT_EQ(snap.goodput[1].met, 1u);
  EXPECT_GT(snap.goodput[1].metPerSecond, 0.0);
  EXPECT_EQ(snap.goodput[2].finished, 0u);
}

// On a device with room left for one chunk of KV pages, a batch reply holding most of it is preempted
// for an interactive one: its KV goes to host RAM, the interactive reply runs, and the batch one
// comes back and ends with exactly the tokens it gets alone.
TEST(ServiceTierPreemption, ABatchReplyGivesItsKvToAnInteractiveOneAndEndsAsIfAlone) {
  const auto prompt = [](const server::ModelHost& host, const char* text, size_t repeat) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < repeat; i++) {
      const auto part = host.model().tokenizer().encode(text, i == 0, false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  };
  auto core = makeCore("cpu:0@64M", 0);
  auto host = load(*core, "tight", "cpu:0");
  const auto batchPrompt = prompt(*host, "Lily and Ben went to the park.", 12);
  const auto urgentPrompt = prompt(*host, "Once upon a time there was a cat.", 9);
  // The reference, which also grows the scratch to the largest step here (a whole prompt).
  const Outcome batchAlone = finish(*start(*host, 24, batchPrompt));
  ASSERT_FALSE(batchAlone.error);
  const size_t chunk = runtime::KvPagePool::kPagesPerChunk * host->model().kvLayout().pageBytes();
  const int64_t perChunk = int64_t(runtime::KvPagePool::kPagesPerChunk) / int64_t(host->model().config().layers) *
                           host->model().kvLayout().pageTokens;
  ASSERT_LT(int64_t(batchPrompt.size()) + 24, perChunk) << "the batch reply fits one chunk";
  ASSERT_GT(int64_t(batchPrompt.size() + urgentPrompt.size()), perChunk) << "both do not";
  // Everything but one and a half chunks of pages is taken (as another model's weights would).
  Device& device = core->device("cpu:0");
  const auto filler = device.allocate(device.info().memoryBudget - device.memoryUsed() - chunk - chunk / 2);
  auto submit = [&](const std::vector<int32_t>& p, uint32_t n, server::ServiceTier tier, size_t queue) {
    server::GenerationRequest r;
    r.prompt = p;
    r.maxTokens = n;
    r.tier = tier;
    auto job = std::make_shared<server::GenerationJob>(r, queue);
    host->submit(job);
    return job;
  };
  // The batch reply's reader falls behind: it stays mid-reply, holding its pages.
  auto batch = submit(batchPrompt, 24, server::ServiceTier::kBatch, 2);
  Outcome batchOut;
  readSome(*batch, batchOut, 2);
  const Outcome urgent = finish(*submit(urgentPrompt, 8, server::ServiceTier::kInteractive, 64));
  ASSERT_FALSE(urgent.error) << urgent.error->what() << "\n" << eventLog(*core);
  batchOut = finish(*batch, batchOut);
  ASSERT_FALSE(batchOut.error) << batchOut.error->what();
  EXPECT_EQ(batchOut.ids, batchAlone.ids);
  const std::string log = eventLog(*core);
  EXPECT_NE(log.find("session.preempted"), std::string::npos) << log;
  EXPECT_NE(log.find("preempted reply back"), std::string::npos) << log;
}

// At max_sessions an interactive request still gets in when a batch reply runs: the batch reply is
// preempted to make room and ends later with its own tokens; another batch request is refused.
TEST(ServiceTierPreemption, AtMaxSessionsABatchReplyMakesRoomForAnInteractiveOne) {
  server::DaemonConfig config;
  config.devices = "cpu:0";
  config.idleSessions = 0;
  config.cpuThreads = 1;
  config.maxSessions = 2;
  config.modelDirs = {kModels};
  auto core = std::make_unique<server::DaemonCore>(config);
  auto host = load(*core, "full", "cpu:0");
  auto submit = [&](const char* text, uint32_t n, server::ServiceTier tier, size_t queue) {
    server::GenerationRequest r;
    r.prompt = host->model().tokenizer().encode(text, true, false);
    r.maxTokens = n;
    r.tier = tier;
    auto job = std::make_shared<server::GenerationJob>(r, queue);
    host->submit(job);
    return job;
  };
  const Outcome alone = finish(*submit("Lily and Ben went to the park.", 20, server::ServiceTier::kBatch, 64));
  ASSERT_FALSE(alone.error);
  // Two batch replies whose readers fall behind: both slots taken.
  auto a = submit("Lily and Ben went to the park.", 20, server::ServiceTier::kBatch, 2);
  auto b = submit("The dog ran to the tree.", 20, server::ServiceTier::kBatch, 2);
  Outcome aOut, bOut;
  readSome(*a, aOut, 2);
  readSome(*b, bOut, 2);
  EXPECT_THROW(submit("One more batch job.", 4, server::ServiceTier::kBatch, 64), Error);
  const Outcome urgent = finish(*submit("Once upon a time", 6, server::ServiceTier::kInteractive, 64));
  ASSERT_FALSE(urgent.error) << urgent.error->what();
  aOut = finish(*a, aOut);
  bOut = finish(*b, bOut);
  ASSERT_FALSE(aOut.error);
  ASSERT_FALSE(bOut.error);
  EXPECT_EQ(aOut.ids, alone.ids);
  EXPECT_NE(eventLog(*core).find("session.preempted"), std::string::npos) << eventLog(*core);
}

}  // namespace
}  // namespace jitllm::scheduler
