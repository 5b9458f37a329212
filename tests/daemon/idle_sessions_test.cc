// Idle sessions against a real DaemonCore: a finished reply's session is kept, and a follow-up
// whose prompt continues the conversation computes only its new tokens and answers exactly what a
// fresh run would; under memory pressure the scheduler parks idle sessions' KV in host RAM, and it
// comes back bitwise when the conversation goes on; a running session takes idle sessions' pages
// before it would run out of memory; other users never continue someone else's session.
#include <gtest/gtest.h>

#include <filesystem>

#include "daemon/scheduler/scheduler.h"
#include "tests/daemon/core_harness.h"

namespace jitllm::scheduler {
namespace {

// The second turn of a conversation: the first prompt, the reply, and more.
std::vector<int32_t> followUp(const server::ModelHost& host, const std::vector<int32_t>& first,
                              const std::vector<int32_t>& reply) {
  std::vector<int32_t> p = first;
  p.insert(p.end(), reply.begin(), reply.end());
  for (int32_t t : host.model().tokenizer().encode(" Then the dog said", false, false)) p.push_back(t);
  return p;
}

// The model's idle sessions once `n` are published (the worker publishes after the reply ends).
std::vector<server::SessionSnapshot> idleSessions(const server::ModelHost& host, size_t n) {
  jitllm::testing::waitUntil([&] { return host.snapshot().idle.size() == n; }, std::chrono::seconds(30));
  return host.snapshot().idle;
}

// What a daemon keeping no idle session answers to `prompt`: the reference.
std::vector<int32_t> fresh(const std::string& devices, const std::vector<int32_t>& prompt, uint32_t tokens) {
  auto core = makeCore(devices, 0);
  auto host = load(*core, "fresh", devices);
  const Outcome out = finish(*start(*host, tokens, prompt));
  EXPECT_FALSE(out.error);
  EXPECT_EQ(out.stats.reusedTokens, 0u);
  return out.ids;
}

TEST(IdleSessions, AFollowUpComputesOnlyItsNewTokensAndAnswersExactlyAsAFreshRun) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto core = makeCore("cpu:0");
  auto host = load(*core, "stories", "cpu:0");
  const std::vector<int32_t> first = host->model().tokenizer().encode("Once upon a time, there was a", true, false);
  const Outcome one = finish(*start(*host, 24, first, 1000));
  ASSERT_FALSE(one.error);
  ASSERT_EQ(idleSessions(*host, 1).size(), 1u);
  EXPECT_EQ(host->snapshot().idle[0].state, server::SessionState::kIdle);
  EXPECT_EQ(host->snapshot().idle[0].tokens, int64_t(first.size() + one.ids.size() - 1));
  EXPECT_TRUE(host->snapshot().sessions.empty());

  const std::vector<int32_t> second = followUp(*host, first, one.ids);
  // Another user with the same conversation computes all of it: sessions are their owner's.
  const Outcome stranger = finish(*start(*host, 24, second, 2000));
  ASSERT_FALSE(stranger.error);
  EXPECT_EQ(stranger.stats.reusedTokens, 0u);

  const Outcome two = finish(*start(*host, 24, second, 1000));
  ASSERT_FALSE(two.error);
  // Everything but the reply's last token (sampled, never fed) was in the idle session's KV.
  EXPECT_EQ(two.stats.reusedTokens, first.size() + one.ids.size() - 1);
  EXPECT_EQ(two.ids, fresh("cpu:0", second, 24));
  EXPECT_EQ(stranger.ids, two.ids);

  // The user edits the last message: the session rewinds to where the prompts part.
  std::vector<int32_t> edited = first;
  edited.insert(edited.end(), one.ids.begin(), one.ids.end());
  for (int32_t t : host->model().tokenizer().encode(" The big cat", false, false)) edited.push_back(t);
  size_t shared = 0;  // where it parts from the second turn's prompt
  while (shared < edited.size() && shared < second.size() && edited[shared] == second[shared]) shared++;
  ASSERT_GE(shared, first.size() + one.ids.size());
  ASSERT_LT(shared, edited.size());
  ASSERT_TRUE(idleSessions(*host, 2).size() == 2);
  const Outcome three = finish(*start(*host, 24, edited, 1000));
  ASSERT_FALSE(three.error);
  EXPECT_EQ(three.stats.reusedTokens, shared);
  // A new conversation sharing only the BOS token leaves the idle sessions alone.
  const Outcome other = finish(*start(*host, 4, host->model().tokenizer().encode("The sun", true, false), 1000));
  EXPECT_EQ(other.stats.reusedTokens, 0u);
  EXPECT_EQ(three.ids, fresh("cpu:0", edited, 24));
  const std::string log = eventLog(*core);
  EXPECT_NE(log.find("session.resumed [stories]"), std::string::npos) << log;
}

TEST(IdleSessions, NoMoreThanTheConfiguredNumberAreKeptAndCancellingOneForgetsIt) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  auto core = makeCore("cpu:0", 2);
  auto host = load(*core, "stories", "cpu:0");
  for (const char* text : {"Once upon a time", "The dog", "A big red ball"}) {
    ASSERT_FALSE(finish(*start(*host, 8, host->model().tokenizer().encode(text, true, false), 1000)).error);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a third would show by now
  auto idle = idleSessions(*host, 2);
  ASSERT_EQ(idle.size(), 2u);  // the least recently used went
  EXPECT_THROW(host->cancelSession(idle[0].id, 2000, false), Error) << "another user's session";
  EXPECT_TRUE(host->cancelSession(idle[0].id, 1000, false));
  ASSERT_EQ(idleSessions(*host, 1).size(), 1u);
  EXPECT_EQ(host->snapshot().idle[0].id, idle[1].id);
}

// On a GPU-like device (lavapipe here): memory pressure parks the idle session's KV in host RAM,
// the device memory goes back, and the conversation continues bitwise, nothing recomputed.
TEST(IdleSessions, UnderMemoryPressureTheirKvIsParkedInHostRamAndComesBackBitwise) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  std::string why;
  auto core = tryMakeCore("cpu:0,vulkan:0", why);
  if (!core) GTEST_SKIP() << "no Vulkan device here: " << why;
  auto host = load(*core, "stories", "vulkan:0");
  const std::vector<int32_t> first = host->model().tokenizer().encode("Once upon a time, there was a", true, false);
  const Outcome one = finish(*start(*host, 40, first, 1000));
  ASSERT_FALSE(one.error);
  ASSERT_EQ(idleSessions(*host, 1).size(), 1u);
  auto snap = host->snapshot();
  ASSERT_EQ(snap.idleKvBytesByDevice.size(), 1u);
  EXPECT_EQ(snap.idleKvBytesByDevice[0].first, "vulkan:0");
  const size_t idleBytes = snap.idleKvBytesByDevice[0].second;
  EXPECT_GT(idleBytes, 0u);
  const size_t before = core->device("vulkan:0").memoryUsed();

  // The telemetry says vulkan:0 is nearly full: the pressure policy parks the idle KV first.
  const size_t total = core->device("vulkan:0").info().memoryBudget;
  Scheduler s(*core,
              script("0 vulkan:0 mem_used=" + std::to_string(total / 100 * 95) + " mem_total=" + std::to_string(total)),
              policies::PolicyConfig{}, "balanced");
  const auto acted = s.tick(0);
  ASSERT_EQ(acted.size(), 1u);
  EXPECT_EQ(acted[0].kind, policies::ActionKind::kParkKv);
  for (int i = 0; i < 500 && host->snapshot().idle.at(0).state != server::SessionState::kParked; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  snap = host->snapshot();
  EXPECT_EQ(snap.idle.at(0).state, server::SessionState::kParked);
  EXPECT_TRUE(snap.idleKvBytesByDevice.empty());
  EXPECT_GT(snap.parkedKvBytes, 0u);
  EXPECT_LT(core->device("vulkan:0").memoryUsed(), before);
  EXPECT_TRUE(everyUnitOn(placement(*host), "vulkan:0")) << "parking idle KV moves no layer";

  const std::vector<int32_t> second = followUp(*host, first, one.ids);
  const Outcome two = finish(*start(*host, 24, second, 1000));
  ASSERT_FALSE(two.error);
  EXPECT_EQ(two.stats.reusedTokens, first.size() + one.ids.size() - 1);
  EXPECT_EQ(two.ids, fresh("cpu:0", second, 24));
  const std::string log = eventLog(*core);
  EXPECT_NE(log.find("session.parked [stories] parked the KV of 1 idle session(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("back from host RAM"), std::string::npos) << log;
}

}  // namespace
}  // namespace jitllm::scheduler
