// The scheduler's scenarios against a real DaemonCore, with scripted telemetry and a virtual clock:
// a device that vanishes mid-generation (DISCONNECTED for the sessions with KV on it only, the
// model re-placed, the other sessions' output unchanged), a device that arrives (layers of a
// slower device move to it while a reply streams), and a model that does not fit (the least
// recently used idle model is paged out; nothing fails with out-of-memory; using the paged-out
// model again works at once and brings it back when there is room).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "daemon/scheduler/scheduler.h"
#include "tests/daemon/core_harness.h"

namespace jitllm::scheduler {
namespace {

TEST(HotPlug, AVanishedDeviceEndsOnlyTheSessionsWithKvOnItAndItsModelsAreReplaced) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto core = makeCore("cpu:0,cpu:1", 0);            // no idle sessions: every page goes back at the end
  auto split = load(*core, "split", "cpu:0,cpu:1");  // blocks on both devices
  auto local = load(*core, "local", "cpu:0");        // nothing on cpu:1
  auto headOff = load(*core, "head", "cpu:0");       // only its output unit on cpu:1
  server::MigrationRequest head;
  head.layers = "output";
  head.target = &core->device("cpu:1");
  ASSERT_TRUE(headOff->migrate(head)->wait(std::chrono::seconds(10)));
  ASSERT_EQ(placement(*headOff).back(), "cpu:1");
  const Outcome reference = finish(*start(*local, 40));
  ASSERT_FALSE(reference.error) << reference.error->what();
  ASSERT_EQ(reference.ids.size(), 40u);

  Scheduler s(*core, script("0 cpu:1 present=1\n100 cpu:1 present=0  # unplugged\n200 cpu:1 present=1\n"),
              policies::PolicyConfig{}, "balanced");
  EXPECT_TRUE(s.tick(0).empty());
  auto a = start(*split, 40), b = start(*local, 40), c = start(*headOff, 40);
  Outcome ra, rb, rc;
  readSome(*a, ra, 8);
  readSome(*b, rb, 8);
  readSome(*c, rc, 8);
  ASSERT_GE(ra.ids.size(), 8u);
  s.tick(100);  // returns once every model is re-placed

  ra = finish(*a, ra);
  ASSERT_TRUE(ra.error.has_value()) << "the session with KV on cpu:1 should have ended";
  EXPECT_EQ(ra.error->kind(), ErrorKind::kDisconnected);
  EXPECT_NE(std::string(ra.error->what()).find("cpu:1 went away"), std::string::npos) << ra.error->what();
  rb = finish(*b, rb);
  rc = finish(*c, rc);
  ASSERT_FALSE(rb.error) << rb.error->what();
  ASSERT_FALSE(rc.error) << rc.error->what();
  EXPECT_EQ(rb.ids, reference.ids);  // never touched
  EXPECT_EQ(rc.ids, reference.ids);  // its head re-placed mid-reply, from the file, no KV lost

  EXPECT_TRUE(everyUnitOn(placement(*split), "cpu:0"));
  EXPECT_TRUE(everyUnitOn(placement(*headOff), "cpu:0"));
  ASSERT_EQ(core->devices().size(), 1u);
  EXPECT_THROW(core->device("cpu:1"), Error);
  const auto table = core->deviceTable().all();
  EXPECT_FALSE(table[1].online);
  EXPECT_NE(table[1].offlineReason.find("gone"), std::string::npos);
  // The re-placed model answers again, with the tokens it always had.
  const Outcome again = finish(*start(*split, 40));
  ASSERT_FALSE(again.error) << again.error->what();
  EXPECT_EQ(again.ids, reference.ids);
  ASSERT_TRUE(split->waitIdle(std::chrono::seconds(10)));
  for (const auto& u : split->snapshot().units) EXPECT_EQ(u.kvPages, 0u) << u.name;

  // Plugged back in: online again, for placement and the policies.
  s.tick(200);
  EXPECT_EQ(core->devices().size(), 2u);
  const std::string log = eventLog(*core);
  EXPECT_NE(log.find("device.removed [] cpu:1 went away"), std::string::npos) << log;
  EXPECT_NE(log.find("model.replaced [split] re-placed blk.3-output of split on cpu:0"), std::string::npos) << log;
  EXPECT_NE(log.find("1 session(s) ended with DISCONNECTED"), std::string::npos) << log;
  EXPECT_NE(log.find("model.replaced [head] re-placed output of head on cpu:0"), std::string::npos) << log;
  EXPECT_NE(log.find("0 session(s) ended"), std::string::npos) << log;
  EXPECT_EQ(log.find("model.replaced [local]"), std::string::npos) << log;
  EXPECT_NE(log.find("device.added [] cpu:1 is online"), std::string::npos) << log;
}

// A model whose blocks are split over cpu:0 and cpu:1 (tensor parallelism) loses cpu:1: its KV
// there is gone, so its sessions end with DISCONNECTED, and its blocks come back whole on cpu:0.
TEST(HotPlug, ALostShardOfASplitModelEndsItsSessionsAndItsBlocksComeBackWholeOnADeviceLeft) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto core = makeCore("cpu:0,cpu:1", 0);
  auto split = load(*core, "split", "cpu:0");
  server::MigrationRequest request;
  request.split = {&core->device("cpu:0"), &core->device("cpu:1")};
  request.target = request.split[0];
  ASSERT_TRUE(split->migrate(request)->wait(std::chrono::seconds(10)));
  ASSERT_EQ(placement(*split)[1], "cpu:0+cpu:1");
  const Outcome reference = finish(*start(*split, 40));
  ASSERT_FALSE(reference.error) << reference.error->what();

  Scheduler s(*core, script("0 cpu:1 present=1\n100 cpu:1 present=0  # unplugged\n"), policies::PolicyConfig{},
              "balanced");
  EXPECT_TRUE(s.tick(0).empty());
  auto a = start(*split, 40);
  Outcome ra;
  readSome(*a, ra, 8);
  s.tick(100);
  ra = finish(*a, ra);
  ASSERT_TRUE(ra.error.has_value()) << "its KV on cpu:1 is gone";
  EXPECT_EQ(ra.error->kind(), ErrorKind::kDisconnected);
  EXPECT_TRUE(everyUnitOn(placement(*split), "cpu:0"));
  const Outcome again = finish(*start(*split, 40));
  ASSERT_FALSE(again.error) << again.error->what();
  EXPECT_EQ(again.ids, reference.ids);
}

TEST(HotPlug, ADeviceThatArrivesTakesTheLayersOfASlowerOneWhileAReplyStreams) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  std::string why;
  auto core = tryMakeCore("cpu:0,vulkan:0", why);
  if (!core) GTEST_SKIP() << "no Vulkan device here: " << why;
  // cpu:0 is "not there" at first, so the model can only go to the (software) Vulkan device.
  Scheduler s(*core, script("0 cpu:0 present=0\n500 cpu:0 present=1  # arrives\n"), policies::PolicyConfig{},
              "balanced");
  EXPECT_TRUE(s.tick(0).empty());
  ASSERT_EQ(core->devices().size(), 1u);
  auto model = load(*core, "stories", "");
  ASSERT_TRUE(everyUnitOn(placement(*model), "vulkan:0"));
  auto job = start(*model, 40);
  Outcome streamed;
  readSome(*job, streamed, 8);
  ASSERT_GE(streamed.ids.size(), 8u);
  const auto acted = s.tick(500);
  ASSERT_EQ(acted.size(), 1u);
  EXPECT_EQ(acted[0].target, DeviceId::parse("cpu:0"));
  EXPECT_EQ(acted[0].reason, "cpu:0 arrived and is faster than vulkan:0");
  streamed = finish(*job, streamed);
  ASSERT_FALSE(streamed.error) << streamed.error->what();
  EXPECT_TRUE(everyUnitOn(settled(*model), "cpu:0"));
  // Greedy tokens from a reply that moved mid-way equal those of one that ran on cpu:0 throughout.
  const Outcome after = finish(*start(*model, 40));
  ASSERT_FALSE(after.error) << after.error->what();
  EXPECT_EQ(streamed.ids, after.ids);
  EXPECT_TRUE(s.tick(600).empty());  // settled: no flapping
}

TEST(HotPlug, AModelThatDoesNotFitPagesOutTheLeastRecentlyUsedIdleModelAndNothingRunsOutOfMemory) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  // How much one stories model takes on the Vulkan device, once it has run.
  size_t perModel = 0;
  try {
    auto probe = makeCore("cpu:0,vulkan:0");
    auto m = load(*probe, "probe", "vulkan:0");
    finish(*start(*m, 8));
    // What placement reserves (weights and one session at the full context) or what it took once
    // it ran (plus activations), whichever is more.
    const auto& c = m->model().config();
    size_t reserve = size_t(c.layers) * size_t(c.contextLength) * 2 * size_t(c.kvHeads) * size_t(c.headDim) * 4;
    for (const auto& u : m->snapshot().units) reserve += u.weightBytes;
    perModel = std::max(reserve, probe->device("vulkan:0").memoryUsed());
  } catch (const Error& e) {
    GTEST_SKIP() << "no Vulkan device here: " << e.what();
  }
  ASSERT_GT(perModel, 0u);
  // Room for two and a half.
  auto core = makeCore("cpu:0,vulkan:0@" + std::to_string((perModel * 5 / 2) >> 10) + "K");
  auto first = load(*core, "first", "vulkan:0");
  auto second = load(*core, "second", "vulkan:0");
  const Outcome reference = finish(*start(*first, 24));
  ASSERT_FALSE(reference.error) << reference.error->what();
  ASSERT_FALSE(finish(*start(*second, 24)).error);  // `first` is now the least recently used
  auto third = load(*core, "third", "vulkan:0");
  EXPECT_TRUE(everyUnitOn(placement(*third), "vulkan:0"));
  EXPECT_TRUE(everyUnitOn(placement(*second), "vulkan:0"));
  EXPECT_TRUE(everyUnitOn(placement(*first), "cpu:0"));
  EXPECT_TRUE(first->snapshot().pagedOut);
  EXPECT_LE(core->device("vulkan:0").memoryUsed(), core->device("vulkan:0").info().memoryBudget);
  std::string log = eventLog(*core);
  EXPECT_NE(log.find("scheduler.acted [first] paging first out to cpu:0: vulkan:0 has"), std::string::npos) << log;
  EXPECT_NE(log.find("model.placed [third] units 0-"), std::string::npos) << log;

  // Used again, the paged-out model answers at once (from where it is) with its tokens; the
  // device is full, so the scheduler leaves it there.
  Scheduler s(*core, std::make_unique<NoTelemetry>(), policies::PolicyConfig{}, "balanced");
  auto job = start(*first, 24);
  Outcome out;
  readSome(*job, out, 4);
  s.tick(0);
  out = finish(*job, out);
  ASSERT_FALSE(out.error) << out.error->what();
  EXPECT_EQ(out.ids, reference.ids);
  // Once room is made (third unloaded), a request brings it home, mid-reply.
  core->unload("third");
  job = start(*first, 24);
  out = {};
  readSome(*job, out, 4);
  for (int64_t t = 1; t < 40 && first->snapshot().pagedOut; t++) {
    s.tick(t);
    settled(*first);
  }
  out = finish(*job, out);
  ASSERT_FALSE(out.error) << out.error->what();
  EXPECT_EQ(out.ids, reference.ids);
  EXPECT_FALSE(first->snapshot().pagedOut);
  EXPECT_TRUE(everyUnitOn(placement(*first), "vulkan:0"));
  log = eventLog(*core);
  EXPECT_NE(log.find("first is in use again: paging"), std::string::npos) << log;
}

}  // namespace
}  // namespace jitllm::scheduler

namespace jitllm::scheduler {
namespace {

// Larger than memory through the daemon: a model named onto a device that cannot hold all its
// blocks streams the rest through it (spill = stream), answers with the tokens it has everywhere
// else, and never runs out of that device's memory.
TEST(LargerThanMemory, BlocksThatDoNotFitStreamThroughTheDeviceAndTheTokensStayTheSame) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  size_t ends = 0, largest = 0, kv = 0, workspace = 0;
  Outcome reference;
  try {
    auto probe = makeCore("cpu:0,vulkan:0");
    auto m = load(*probe, "probe", "vulkan:0");
    reference = finish(*start(*m, 30));
    const auto snap = m->snapshot();
    ends = snap.units.front().weightBytes + snap.units.back().weightBytes;
    for (size_t u = 1; u + 1 < snap.units.size(); u++) largest = std::max(largest, snap.units[u].weightBytes);
    const auto& c = m->model().config();
    kv = size_t(c.layers) * size_t(c.contextLength) * 2 * size_t(c.kvHeads) * size_t(c.headDim) * 4;
    workspace = m->model().workspaceBytesEstimate();
  } catch (const Error& e) {
    GTEST_SKIP() << "no Vulkan device here: " << e.what();
  }
  ASSERT_FALSE(reference.error);
  // The activations, the ends, the KV, two slots and two resident blocks (and a little, for rounding).
  const size_t cap = workspace + ends + kv + 4 * largest + largest / 2;
  auto core = makeCore("cpu:0,vulkan:0@" + std::to_string(cap >> 10) + "K");
  auto model = load(*core, "big", "vulkan:0");
  int streamed = 0;
  for (const auto& u : model->snapshot().units) {
    EXPECT_EQ(u.device, "vulkan:0") << u.name;
    streamed += u.residency == server::Residency::kStreamed;
  }
  EXPECT_GE(streamed, 2);
  EXPECT_LE(streamed, 4);
  const Outcome out = finish(*start(*model, 30));
  ASSERT_FALSE(out.error) << out.error->what();
  EXPECT_EQ(out.ids, reference.ids);
  EXPECT_LE(core->device("vulkan:0").memoryUsed(), cap);
  EXPECT_NE(eventLog(*core).find("blocks stream through vulkan:0 each step (spill = stream)"), std::string::npos)
      << eventLog(*core);
}

}  // namespace
}  // namespace jitllm::scheduler
