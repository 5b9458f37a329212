// Sampling: greedy ties, seeds, and that each filter keeps exactly the tokens it should.
#include "engine/runtime/sampler.h"

#include <gtest/gtest.h>

#include <map>

#include "base/error.h"

namespace jitllm::runtime {
namespace {

TEST(Sampler, GreedyPicksTheHighestLogitAndBreaksTiesTowardTheLowestId) {
  Sampler s({});
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits, {}), 1);
  EXPECT_EQ(argmax(logits), 1);
}

TEST(Sampler, TheSameSeedGivesTheSameTokensAndAnotherSeedOthers) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); i++) logits[i] = float(i % 7) * 0.3f;
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; i++) out.push_back(s.sample(logits, {}));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, TopKOneIsGreedyAndTopKLimitsTheChoices) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.9f, 0.0f, 2.8f};
  SamplingParams p;
  p.temperature = 5.0f;
  p.topK = 1;
  Sampler one(p);
  for (int i = 0; i < 20; i++) EXPECT_EQ(one.sample(logits, {}), 1);
  p.topK = 3;
  Sampler three(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 500; i++) seen[three.sample(logits, {})]++;
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen.count(1) && seen.count(2) && seen.count(4));
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingTheMass) {
  // Probabilities ~ 0.64, 0.24, 0.09, 0.03: top-p 0.8 keeps the first two.
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.topP = 0.8f;
  Sampler s(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 500; i++) seen[s.sample(logits, {})]++;
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[0], seen[1]);
}

TEST(Sampler, MinPDropsTokensLessLikelyThanAFractionOfTheBest) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};  // relative 1, 0.37, 0.14, 0.05
  SamplingParams p;
  p.temperature = 1.0f;
  p.minP = 0.2f;
  Sampler s(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 500; i++) seen[s.sample(logits, {})]++;
  EXPECT_EQ(seen.size(), 2u);
}

TEST(Sampler, RepetitionPenaltyTurnsGreedyAwayFromRecentTokens) {
  const std::vector<float> logits = {1.0f, 1.5f, -0.5f};
  SamplingParams p;
  p.repeatPenalty = 2.0f;
  Sampler s(p);
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(s.sample(logits, history), 0);  // 1.5 / 2 < 1.0
  p.repeatLastN = 1;
  Sampler recentOnly(p);
  const std::vector<int32_t> older = {1, 2};
  EXPECT_EQ(recentOnly.sample(logits, older), 1);  // token 1 is outside the window
}

TEST(Sampler, OutOfRangeParametersAreRefusedByName) {
  SamplingParams p;
  p.topP = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.minP = 1.0f;
  EXPECT_THROW(Sampler{p}, Error);
}

}  // namespace
}  // namespace jitllm::runtime
