// The batching step loop's guarantee, on every backend of the build: a sequence gets exactly the
// tokens it gets alone, whatever shares its steps - greedy or sampled with a seed - however its
// prompt was chunked and whenever the others joined.
#include "engine/runtime/step_loop.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/devices/builtin_backends.h"
#include "engine/kv/host_kv.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/cpu/cpu_device.h"
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

// Preemption: on a device whose budget holds one chunk of KV pages, an urgent sequence that finds
// no pages suspends the less urgent one; its KV is parked in host RAM and comes back when there is
// room, and both replies are exactly what each gets alone - greedy and seeded sampling.
TEST_F(StepLoopPriorities, APreemptedSequenceResumesFromHostRamWithTheTokensItGetsAlone) {
  constexpr int64_t kChunk = 64;  // prompt tokens a step, so that every step needs the same scratch
  // What the model needs besides its KV: measured on a device with room to spare.
  cpu::CpuDeviceOptions roomy;
  roomy.threads = 1;
  cpu::CpuDevice probe(roomy);
  runtime::ModelLoadOptions probeOptions;
  probeOptions.devices = {&probe};
  auto probed = runtime::Model::load(sharedPath("models/stories260K.gguf"), probeOptions);
  {
    // A step as large as the test's (a prompt chunk and a decode token): its scratch stays.
    auto s = probed->createSession(512);
    std::vector<int32_t> ids(kChunk + 1, 5);
    runtime::SequenceInput in{s.get(), ids, false};
    std::vector<float> logits;
    probed->forward({&in, 1}, logits);
  }
  const size_t chunk = runtime::KvPagePool::kPagesPerChunk * probed->kvLayout().pageBytes();
  const size_t base = probe.memoryUsed();  // weights and scratch (the session's pages are back)
  const int layers = int(probed->config().layers);
  const int pageTokens = probed->kvLayout().pageTokens;
  // Tokens of context one chunk holds over every layer.
  const int64_t perChunk = int64_t(runtime::KvPagePool::kPagesPerChunk) / layers * pageTokens;
  ASSERT_GT(perChunk, 64) << "the test needs room for a prompt in one chunk";

  cpu::CpuDeviceOptions tight;
  tight.threads = 1;
  tight.memoryBudget = base + chunk + chunk / 2;  // one chunk of pages, not two
  cpu::CpuDevice device(tight);
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  auto model = runtime::Model::load(sharedPath("models/stories260K.gguf"), options);
  auto make = [&](const char* text, int priority, size_t repeat, int32_t maxTokens, bool sampled) {
    runtime::SequenceRequest r;
    for (size_t i = 0; i < repeat; i++) {
      const auto ids = model->tokenizer().encode(text, i == 0, true);
      r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
    }
    r.maxTokens = maxTokens;
    r.stopAtEndOfGeneration = false;
    r.priority = priority;
    if (sampled) r.sampling = sampledWithSeed(31);
    return r;
  };
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "seeded sampling" : "greedy");
    // The batch one takes most of the chunk; the urgent one cannot fit beside it.
    const auto batchRequest = make("Lily and Ben went to the park.", 2, size_t(perChunk * 6 / 10 / 9), 12, sampled);
    const auto urgentRequest = make("Once upon a time there was a cat.", 0, size_t(perChunk * 5 / 10 / 10), 6, sampled);
    ASSERT_LT(int64_t(batchRequest.prompt.size() + urgentRequest.prompt.size()), 2 * perChunk);
    ASSERT_GT(int64_t(batchRequest.prompt.size() + urgentRequest.prompt.size()), perChunk);
    auto alone = [&](const runtime::SequenceRequest& r) {
      runtime::StepLoop::Options chunked;
      chunked.prefillChunk = kChunk;
      runtime::StepLoop loop(*model, chunked);
      Collector c;
      loop.add(model->createSession(512), r, &c);
      while (loop.step()) {
      }
      return c.tokens;
    };
    const auto batchAlone = alone(batchRequest), urgentAlone = alone(urgentRequest);

    std::unique_ptr<runtime::HostKv> parked;
    int suspensions = 0;
    runtime::StepLoop::Options o;
    o.prefillChunk = kChunk;
    o.onSuspend = [&](runtime::Sequence& victim, std::unique_ptr<runtime::Session> session) {
      EXPECT_EQ(victim.request().priority, 2);
      parked = std::make_unique<runtime::HostKv>(*session);
      suspensions++;
    };
    runtime::StepLoop loop(*model, o);
    Collector batch, urgent;
    auto& b = loop.add(model->createSession(512), batchRequest, &batch);
    while (b.generated() < 3)
      ASSERT_TRUE(loop.step()) << (b.error() ? b.error()->what() : "") << " ended " << b.ended() << " fed " << b.fed()
                               << " of " << b.history().size() << " generated " << b.generated();
    auto& u = loop.add(model->createSession(512), urgentRequest, &urgent);
    ASSERT_TRUE(loop.step());
    EXPECT_EQ(suspensions, 1);
    EXPECT_TRUE(b.suspended());
    EXPECT_FALSE(u.ended()) << (u.error() ? u.error()->what() : "");
    while (!u.ended()) ASSERT_TRUE(loop.step());
    EXPECT_FALSE(u.error());
    for (auto& ended : loop.takeEnded()) EXPECT_FALSE(ended->error());  // the urgent one: its pages go back
    EXPECT_FALSE(loop.step()) << "the suspended sequence sits out";
    ASSERT_TRUE(parked);
    loop.resume(b, parked->restore(*model));
    while (loop.step()) {
    }
    EXPECT_FALSE(b.error());
    EXPECT_EQ(urgent.tokens, urgentAlone);
    EXPECT_EQ(batch.tokens, batchAlone);
  }
}

// The serving guarantee on the CPU's prompt path (byte activations for prompt rows, CpuDevice):
// sequences whose prompts take it (StepLoop::Options::promptPathMinTokens: 128 by default, 0 for
// every prompt) get the same greedy tokens in a loop of their own as together in any batch, their
// prompts fed in chunks of 3 beside the others' decoding or whole. The quantized micro model, whose
// q4_K and q6_K products have the path.
TEST(StepLoopPromptPath, SequencesOnTheCpuPromptPathGetTheirTokensAloneInAnyBatch) {
  cpu::CpuDeviceOptions o;
  o.threads = 2;
  cpu::CpuDevice device(o);
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  auto model = runtime::Model::load(goldenPath("micro/micro-q4_k_m.gguf"), options);
  std::mt19937 rng(31);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t length : {size_t(150), size_t(9), size_t(200), size_t(128), size_t(17), size_t(140)}) {
    std::vector<int32_t> p(length);
    for (auto& id : p) id = int32_t(1 + rng() % uint32_t(model->config().vocabSize - 1));
    prompts.push_back(std::move(p));
  }
  const auto run = [&](std::vector<size_t> which, int64_t chunk, int64_t minTokens) {
    runtime::StepLoop::Options lo;
    lo.prefillChunk = chunk;
    lo.promptPathMinTokens = minTokens;
    runtime::StepLoop loop(*model, lo);
    std::vector<Collector> out(which.size());
    for (size_t j = 0; j < which.size(); j++) {
      if (j == (which.size() + 1) / 2) {
        for (int s = 0; s < 3; s++) loop.step();
      }
      runtime::SequenceRequest r;
      r.prompt = prompts[which[j]];
      r.maxTokens = 8;
      r.stopAtEndOfGeneration = false;
      loop.add(model->createSession(256), r, &out[j]);
    }
    while (loop.step()) {
    }
    for (auto& ended : loop.takeEnded()) EXPECT_FALSE(ended->error()) << ended->error()->what();
    std::vector<std::vector<int32_t>> tokens;
    for (auto& c : out) tokens.push_back(c.tokens);
    return tokens;
  };
  std::vector<std::vector<int32_t>> decodeAlone;
  for (size_t i = 0; i < prompts.size(); i++)
    decodeAlone.push_back(run({i}, 512, std::numeric_limits<int64_t>::max())[0]);
  for (int64_t minTokens : {runtime::kPromptPathMinTokens, int64_t(0)}) {
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < prompts.size(); i++) alone.push_back(run({i}, 512, minTokens)[0]);
    for (int64_t chunk : {int64_t(3), int64_t(512)}) {
      const auto together = run({0, 1, 2, 3, 4, 5}, chunk, minTokens);
      for (size_t i = 0; i < prompts.size(); i++) {
        EXPECT_EQ(together[i], alone[i]) << "sequence " << i << ", prompt chunks of " << chunk << ", prompt path from "
                                         << minTokens << " tokens";
      }
    }
    // Short prompts keep decode's path under the default threshold.
    if (minTokens == runtime::kPromptPathMinTokens) {
      EXPECT_EQ(alone[1], decodeAlone[1]);
      EXPECT_EQ(alone[4], decodeAlone[4]);
    }
  }
}

}  // namespace
}  // namespace jitllm::testing
