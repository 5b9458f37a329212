// The batching step loop's guarantee, on every backend of the build: a sequence gets exactly the
// tokens it gets alone, whatever shares its steps - greedy or sampled with a seed - however its
// prompt was chunked and whenever the others joined.
#include "engine/runtime/step_loop.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/devices/builtin_backends.h"
#include "tests/runtime/test_support.h"

namespace jitllm::testing {
namespace {

struct Collector final : runtime::SequenceListener {
  std::vector<int32_t> tokens;
  void generated(int32_t token, std::string_view, std::span<const float>) override { tokens.push_back(token); }
};

runtime::SamplingParams sampledWithSeed(uint64_t seed) {
  runtime::SamplingParams s;
  s.temperature = 0.9f;
  s.topK = 40;
  s.topP = 0.95f;
  s.minP = 0.02f;
  s.repeatPenalty = 1.1f;
  s.seed = seed;
  return s;
}

class StepLoopBatching : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    registry_ = runtime::builtinBackends();
    Backend* backend = registry_.find(GetParam());
    if (backend == nullptr) GTEST_SKIP() << "the " << GetParam() << " backend is not built in";
    std::string why;
    if (backend->enumerate(&why).devices.empty()) GTEST_SKIP() << "no " << GetParam() << " device here: " << why;
    device_ = registry_.open(DeviceRequest{{GetParam(), 0}, 0}, 2);
    runtime::ModelLoadOptions options;
    options.devices = {device_.get()};
    model_ = runtime::Model::load(sharedPath("models/stories260K.gguf"), options);
    const auto& tok = model_->tokenizer();
    // Prompts of different lengths, so prefills of several steps run beside decodes.
    const char* texts[] = {"Once upon a time",
                           "The little dog",
                           "Lily and Ben went to the park to play with a ball",
                           "One day",
                           "The sun was",
                           "Tom had a big red",
                           "A girl",
                           "The cat sat on the mat and"};
    for (int i = 0; i < 16; i++) {
      std::string text = texts[i % 8];
      if (i >= 8) text += " and then the bird said hello to them all";
      prompts_.push_back(tok.encode(text, true, true));
    }
  }

  // Lavapipe runs a step in tens of milliseconds: fewer tokens there.
  int32_t maxTokens() const { return GetParam() == "vulkan" ? 12 : 40; }

  runtime::SequenceRequest request(size_t i, bool sampled) const {
    runtime::SequenceRequest r;
    r.prompt = prompts_[i];
    r.maxTokens = maxTokens();
    r.stopAtEndOfGeneration = false;
    if (sampled) r.sampling = sampledWithSeed(1000 + i);
    return r;
  }

  // The first `n` requests in one loop: half join at once, the rest a few steps later (their
  // prefill then shares steps with the others' decode), prompts fed `chunk` tokens a step.
  std::vector<std::vector<int32_t>> runTogether(size_t n, bool sampled, int64_t chunk) {
    runtime::StepLoop::Options o;
    o.prefillChunk = chunk;
    runtime::StepLoop loop(*model_, o);
    std::vector<Collector> out(n);
    for (size_t i = 0; i < n; i++) {
      if (i == (n + 1) / 2) {
        for (int s = 0; s < 3; s++) loop.step();
      }
      loop.add(model_->createSession(256), request(i, sampled), &out[i]);
    }
    while (loop.step()) {
    }
    for (auto& s : loop.takeEnded()) EXPECT_FALSE(s->error()) << s->error()->what();
    std::vector<std::vector<int32_t>> tokens;
    for (auto& c : out) tokens.push_back(c.tokens);
    return tokens;
  }

  // The first `n` requests, each alone in its loop.
  std::vector<std::vector<int32_t>> runAlone(size_t n, bool sampled) {
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < n; i++) {
      runtime::StepLoop loop(*model_, {});
      Collector c;
      loop.add(model_->createSession(256), request(i, sampled), &c);
      while (loop.step()) {
      }
      EXPECT_EQ(c.tokens.size(), size_t(maxTokens()));
      alone.push_back(c.tokens);
    }
    return alone;
  }

  void expectTheSameAtEveryBatchSize(bool sampled) {
    const auto alone = runAlone(prompts_.size(), sampled);
    // 4 and 16 at once; prompts fed 3 tokens a step (prefill chunks beside decodes) or whole.
    for (auto [n, chunk] : {std::pair<size_t, int64_t>{4, 512}, {4, 3}, {16, 3}, {16, 512}}) {
      const auto together = runTogether(n, sampled, chunk);
      for (size_t i = 0; i < n; i++) {
        EXPECT_EQ(together[i], alone[i]) << "sequence " << i << " of " << n << ", prompt chunks of " << chunk;
      }
    }
    alone_ = alone;
  }

  runtime::BackendRegistry registry_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<runtime::Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::vector<int32_t>> alone_;
};

TEST_P(StepLoopBatching, GreedySequencesGetTheirTokensAloneAtEveryBatchSize) { expectTheSameAtEveryBatchSize(false); }

TEST_P(StepLoopBatching, SeededSampledSequencesGetTheirTokensAloneAtEveryBatchSize) {
  expectTheSameAtEveryBatchSize(true);
  // The sampler did something: sampled replies are not the greedy ones.
  const auto greedy = runAlone(4, false);
  size_t differ = 0;
  for (size_t i = 0; i < greedy.size(); i++) differ += greedy[i] != alone_[i];
  EXPECT_GE(differ, 3u);
}

INSTANTIATE_TEST_SUITE_P(Backends, StepLoopBatching, ::testing::Values("cpu", "vulkan", "cuda"),
                         [](const auto& info) { return info.param; });

// Priorities (the daemon's service tiers), on the CPU: who gets a step's tokens first, and how an
// urgent sequence's decoding holds the others' prompts to what fits its time per token.
class StepLoopPriorities : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = runtime::builtinBackends();
    device_ = registry_.open(DeviceRequest{{"cpu", 0}, 0}, 2);
    runtime::ModelLoadOptions options;
    options.devices = {device_.get()};
    model_ = runtime::Model::load(sharedPath("models/stories260K.gguf"), options);
  }
  runtime::SequenceRequest request(const std::string& text, int priority, int32_t maxTokens, size_t repeat = 1) const {
    runtime::SequenceRequest r;
    for (size_t i = 0; i < repeat; i++) {
      const auto ids = model_->tokenizer().encode(text, i == 0, true);
      r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
    }
    r.maxTokens = maxTokens;
    r.stopAtEndOfGeneration = false;
    r.priority = priority;
    return r;
  }
  std::vector<int32_t> alone(const runtime::SequenceRequest& r) {
    runtime::StepLoop loop(*model_, {});
    Collector c;
    loop.add(model_->createSession(1024), r, &c);
    while (loop.step()) {
    }
    return c.tokens;
  }

  runtime::BackendRegistry registry_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<runtime::Model> model_;
};

TEST_F(StepLoopPriorities, TheMostUrgentPromptTakesTheStepsTokensFirst) {
  runtime::StepLoop::Options o;
  o.stepTokens = 8;
  runtime::StepLoop loop(*model_, o);
  Collector later, urgent;
  auto& l = loop.add(model_->createSession(512), request("The little dog ran", 1, 4, 4), &later);
  auto& u = loop.add(model_->createSession(512), request("Once upon a time there was", 0, 4, 4), &urgent);
  ASSERT_TRUE(loop.step());
  EXPECT_EQ(u.fed(), 8u) << "added second, but urgent: the whole budget";
  EXPECT_EQ(l.fed(), 0u);
  while (u.generated() == 0) ASSERT_TRUE(loop.step());
  EXPECT_LT(l.fed(), l.history().size()) << "the later prompt waited for the urgent one";
}

TEST_F(StepLoopPriorities, AnUrgentDecodeHoldsOtherPromptsToItsTimePerTokenAndNoTokenChanges) {
  const auto urgentRequest = request("Once upon a time", 0, 40);
  const auto batchRequest = request("Lily and Ben went to the park to play with a ball.", 1, 8, 12);
  ASSERT_GT(batchRequest.prompt.size(), 150u);
  runtime::StepLoop::Options o;
  o.prefillChunk = 64;
  o.urgentStepMs = 1e-6;  // every step is over it: the budget halves down to kMinUrgentPrefill
  runtime::StepLoop loop(*model_, o);
  Collector urgent, batch;
  loop.add(model_->createSession(1024), urgentRequest, &urgent);
  ASSERT_TRUE(loop.step());  // the urgent prompt
  EXPECT_EQ(loop.prefillBudget(), 64) << "no urgent decode steered it yet: a whole chunk";
  auto& b = loop.add(model_->createSession(1024), batchRequest, &batch);
  std::vector<size_t> fedPerStep;
  for (int i = 0; i < 4; i++) {
    const size_t before = b.fed();
    ASSERT_TRUE(loop.step());
    fedPerStep.push_back(b.fed() - before);
  }
  EXPECT_EQ(fedPerStep, (std::vector<size_t>{64, 32, 16, 16})) << "halved after each step over the limit";
  EXPECT_EQ(loop.prefillBudget(), runtime::StepLoop::kMinUrgentPrefill);
  while (loop.step()) {
  }
  EXPECT_EQ(urgent.tokens, alone(urgentRequest));
  EXPECT_EQ(batch.tokens, alone(batchRequest));
  // Without the limit the same prompt goes a whole chunk a step.
  o.urgentStepMs = 0;
  runtime::StepLoop free(*model_, o);
  Collector u2, b2;
  free.add(model_->createSession(1024), urgentRequest, &u2);
  free.step();
  auto& b2s = free.add(model_->createSession(1024), batchRequest, &b2);
  free.step();
  free.step();
  free.step();
  EXPECT_EQ(b2s.fed(), 192u);
}

}  // namespace
}  // namespace jitllm::testing
