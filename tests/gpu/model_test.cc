// Whole models on the tested GPU backend's device 0 (testedBackend()) against the CPU backend and
// llama.cpp's goldens. Compiled into each GPU test binary, which instantiates the suites.
#include "engine/runtime/model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string_view>

#include "engine/kv/host_kv.h"
#include "engine/runtime/step_loop.h"
#include "policies/pressure_policy.h"
#include "tests/gpu/gpu_model_tests.h"
#include "tests/runtime/migration_harness.h"
#include "tools/random_model.h"

namespace jitllm::testing {
namespace {

std::string sharedPath(const std::string& rel) { return std::string(JITLLM_SHARED_DIR) + "/" + rel; }

std::vector<int32_t> readIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

struct GreedyGolden {
  std::string prompt;  // as written in the file (C-escaped)
  std::vector<int32_t> promptTokens, greedyTokens;
};

// tests/goldens/stories260K_greedy.txt: prompt_tokens / greedy_tokens lines, in order.
std::vector<GreedyGolden> readGreedyGoldens() {
  std::ifstream in(std::string(JITLLM_GOLDENS_DIR) + "/stories260K_greedy.txt");
  std::vector<GreedyGolden> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("prompt: ", 0) == 0) out.push_back({line.substr(8), {}, {}});
    if (line.rfind("prompt_tokens: ", 0) == 0) out.back().promptTokens = readIds(line.substr(15));
    if (line.rfind("greedy_tokens: ", 0) == 0) out.back().greedyTokens = readIds(line.substr(15));
  }
  return out;
}

// Devices and a model placed on them; unit u on devices[placement[u]].
struct Loaded {
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<runtime::Model> model;
};

Loaded load(const std::string& path, const std::vector<std::string>& kinds, std::vector<int> placement = {},
            KvPrecision kv = KvPrecision::kF32) {
  Loaded l;
  runtime::ModelLoadOptions o;
  for (const auto& k : kinds) {
    if (k == "cpu") {
      l.devices.push_back(makeCpuDevice(int(l.devices.size())));
    } else {
      l.devices.push_back(testedBackend().make(k == "gpu1" ? 1 : 0));
    }
    o.devices.push_back(l.devices.back().get());
  }
  o.placement = std::move(placement);
  o.kvPrecision = kv;
  l.model = runtime::Model::load(path, o);
  return l;
}

std::vector<int32_t> greedy(runtime::Model& model, const std::vector<int32_t>& prompt, int32_t n) {
  auto session = model.createSession(int64_t(prompt.size()) + n + 1);
  runtime::SequenceRequest req;
  req.prompt = prompt;
  req.maxTokens = n;
  std::vector<int32_t> out;
  runtime::generate(model, *session, req, [&](int32_t t, std::span<const float>) {
    out.push_back(t);
    return true;
  });
  return out;
}

std::vector<float> scoreAll(runtime::Model& model, const std::vector<int32_t>& ids) {
  auto session = model.createSession(int64_t(ids.size()));
  std::vector<float> logits;
  runtime::SequenceInput in{session.get(), ids, true};
  model.forward({&in, 1}, logits);
  return logits;
}

// llama.cpp's own rounding flips one near-tie of the goldens (see tests/runtime/fidelity_test.cc):
// there jitllm (CPU and GPUs alike) follows the float64 truth.
constexpr const char* kDeviationPrompt = "Sara had a red ball. She";
constexpr size_t kDeviationPosition = 66;

TEST_P(GpuModels, Stories260KGreedyIsTheCpusAndLlamaCppsTokenForToken) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 11u);
  auto gpu = load(path, {"gpu"});
  auto cpu = load(path, {"cpu"});
  size_t identical = 0;
  for (size_t i = 0; i < goldens.size(); i++) {
    const auto& g = goldens[i];
    SCOPED_TRACE(g.prompt);
    const auto ours = greedy(*gpu.model, g.promptTokens, int32_t(g.greedyTokens.size()));
    EXPECT_EQ(ours, greedy(*cpu.model, g.promptTokens, int32_t(g.greedyTokens.size())));
    if (g.prompt == kDeviationPrompt) {
      ASSERT_GT(ours.size(), kDeviationPosition);
      EXPECT_TRUE(std::equal(ours.begin(), ours.begin() + long(kDeviationPosition), g.greedyTokens.begin()));
      EXPECT_EQ(g.greedyTokens[kDeviationPosition], 448);
      EXPECT_EQ(ours[kDeviationPosition], 442);
      continue;
    }
    EXPECT_EQ(ours, g.greedyTokens);
    identical += ours == g.greedyTokens;
  }
  EXPECT_GE(identical, 10u);
}

TEST_P(GpuModels, PrefillAndTokenByTokenDecodeGiveBitIdenticalLogits) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto gpu = load(path, {"gpu"});
  const std::vector<int32_t> ids = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376,
                                    298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
  const auto all = scoreAll(*gpu.model, ids);
  auto session = gpu.model->createSession(int64_t(ids.size()));
  std::vector<float> stepwise;
  for (int32_t id : ids) {
    runtime::SequenceInput in{session.get(), {&id, 1}, false};
    gpu.model->forward({&in, 1}, stepwise);
  }
  ASSERT_EQ(all.size(), stepwise.size());
  EXPECT_EQ(0, std::memcmp(all.data(), stepwise.data(), all.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(all.data(), scoreAll(*gpu.model, ids).data(), all.size() * sizeof(float)))
      << "a second run differs";
}

TEST_P(GpuModels, LayersSplitOverCpuAndGpuGiveTheSameGreedyTokens) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const auto goldens = readGreedyGoldens();
  ASSERT_FALSE(goldens.empty());
  auto cpu = load(path, {"cpu"});
  const int units = cpu.model->unitCount();
  // Embedding and the first blocks on the CPU, the rest and the head on the GPU; and the reverse.
  std::vector<int> forward(size_t(units), 1), backward(size_t(units), 0);
  for (int u = 0; u < units / 2; u++) forward[size_t(u)] = 0, backward[size_t(u)] = 1;
  auto split = load(path, {"cpu", "gpu"}, forward);
  auto reverse = load(path, {"cpu", "gpu"}, backward);
  for (size_t i : {size_t(0), size_t(3)}) {
    SCOPED_TRACE("golden prompt #" + std::to_string(i));
    const auto& g = goldens[i];
    const auto want = greedy(*cpu.model, g.promptTokens, 100);
    EXPECT_EQ(greedy(*split.model, g.promptTokens, 100), want);
    EXPECT_EQ(greedy(*reverse.model, g.promptTokens, 100), want);
  }
}

// The engine-core tolerance: teacher-forced logits within NMSE 1e-6 of the CPU backend (in
// practice ~1e-12: both compute in float32 over bit-identical dequantized weights).
// The random-weight `tiny` model in `mix` written to a temporary file; empty (and a reason in
// `skip`) without the vocab file it takes its tokenizer from.
std::string writeTinyModel(const std::string& mix, std::string& skip) {
  const auto shape = tools::findShape("tiny");
  JITLLM_ASSERT(shape);
  if (!std::filesystem::exists(sharedPath(shape->vocabFile))) {
    skip = "no " + sharedPath(shape->vocabFile);
    return {};
  }
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("jitllm-" + std::string(testedBackend().name) + "-tiny-" + mix + "-" + std::to_string(getpid()) + ".gguf"))
          .string();
  tools::writeRandomModel({*shape, *tools::findMix(mix), 7, JITLLM_SHARED_DIR}, path);
  return path;
}

// n token ids below `vocab` from seed, the first 1 (BOS).
std::vector<int32_t> randomIds(size_t n, uint32_t seed, int64_t vocab) {
  std::vector<int32_t> ids(n);
  std::mt19937 rng(seed);
  for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
  ids[0] = 1;
  return ids;
}

TEST_P(GpuTinyModels, TeacherForcedLogitsStayWithin1e6NmseOfTheCpu) {
  JITLLM_REQUIRE_GPU();
  const std::string mix = GetParam();
  std::string skip;
  const std::string path = writeTinyModel(mix, skip);
  if (path.empty()) GTEST_SKIP() << skip;
  auto gpu = load(path, {"gpu"});
  auto cpu = load(path, {"cpu"});
  auto gpu16 = load(path, {"gpu"}, {}, KvPrecision::kF16);
  auto cpu16 = load(path, {"cpu"}, {}, KvPrecision::kF16);
  std::filesystem::remove(path);  // the mappings keep the bytes
  const std::vector<int32_t> ids = randomIds(40, 11, cpu.model->config().vocabSize);
  const auto want = scoreAll(*cpu.model, ids);
  const auto got = scoreAll(*gpu.model, ids);
  ASSERT_EQ(got.size(), want.size());
  const double e = nmse(got, want);
  std::printf("tiny %-7s %s vs cpu: nmse %.3e\n", mix.c_str(), testedBackend().name, e);
  EXPECT_LE(e, 1e-6);
  // fp16 KV on both sides: K and V are rounded by the same rule on both.
  const double e16 = nmse(scoreAll(*gpu16.model, ids), scoreAll(*cpu16.model, ids));
  std::printf("tiny %-7s %s vs cpu with fp16 KV: nmse %.3e\n", mix.c_str(), testedBackend().name, e16);
  EXPECT_LE(e16, 1e-6);
}

// Live migration across backends, mid-reply: all units CPU -> GPU at step 20, back at 40, two
// blocks to the GPU at 60, with three sessions decoding. Greedy tokens must be those of a run that
// stayed on the CPU, and every step's logits within the backends' tolerance of it.
void expectMigrationKeepsTheCpusTokens(const std::string& path, const std::vector<std::vector<int32_t>>& prompts) {
  auto ref = load(path, {"cpu"});
  const MigratedRun want = runWithMigrations(*ref.model, prompts, 80, {});
  const int units = ref.model->unitCount();
  auto m = load(path, {"cpu", "gpu"}, std::vector<int>(size_t(units), 0));
  Device* cpu = m.devices[0].get();
  Device* gpu = m.devices[1].get();
  const MigratedRun got = runWithMigrations(*m.model, prompts, 80, {{20, "", gpu}, {40, "", cpu}, {60, "1-2", gpu}});
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.stats.size(), 3u);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t step = 0; step < want.logits.size(); step++) {
    // Before the first move everything ran on the CPU; afterwards the KV holds the GPU's rounding,
    // also once back on the CPU.
    if (step < size_t(got.commitSteps[0])) {
      EXPECT_EQ(
          0, std::memcmp(got.logits[step].data(), want.logits[step].data(), want.logits[step].size() * sizeof(float)))
          << "step " << step << " ran on the CPU";
    } else {
      EXPECT_LE(nmse(got.logits[step], want.logits[step]), 1e-6) << "step " << step;
    }
  }
  for (size_t i = 0; i < got.stats.size(); i++) {
    EXPECT_EQ(got.stats[i].recomputedTokens, 0);
    EXPECT_EQ(got.stats[i].sessions, int(prompts.size()));
    EXPECT_TRUE(got.poolsBalanced[i]);
    std::printf(
        "%s migration %zu (%s -> %s): %d units, pause %.3f ms, prepare %.1f ms, %zu B pre-copied, %zu B in the pause\n",
        testedBackend().name, i, got.stats[i].from.c_str(), i == 1 ? "cpu" : testedBackend().name, got.stats[i].units,
        got.stats[i].pauseMs, got.stats[i].prepareMs, got.stats[i].bytesPrecopied, got.stats[i].bytesInPause);
  }
  for (int u = 0; u < units; u++) EXPECT_EQ(&m.model->unitDevice(u), u == 2 || u == 3 ? gpu : cpu) << u;
  EXPECT_EQ(pagesInUse(*m.model), 0u);
}

TEST_P(GpuModels, LayersMigrateBetweenCpuAndGpuMidReplyWithoutChangingAToken) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 3u);
  expectMigrationKeepsTheCpusTokens(path, {goldens[0].promptTokens, goldens[1].promptTokens, goldens[2].promptTokens});
}

// Skips unless the tested backend has two devices and stories260K is there; declares `path`.
#define JITLLM_REQUIRE_TWO_GPUS_AND_STORIES(path)                                          \
  JITLLM_REQUIRE_GPU();                                                                    \
  if (testedBackend().deviceCount() < 2) {                                                 \
    GTEST_SKIP() << "one " << testedBackend().name << " device here; this test needs two"; \
  }                                                                                        \
  const std::string path = sharedPath("models/stories260K.gguf");                          \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path

void expectBitwiseSameLogits(const MigratedRun& got, const MigratedRun& want) {
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t step = 0; step < want.logits.size(); step++) {
    ASSERT_EQ(0,
              std::memcmp(got.logits[step].data(), want.logits[step].data(), want.logits[step].size() * sizeof(float)))
        << "step " << step;
  }
}

// A reply whose layers move back and forth between two devices mid-reply (at 20, 40 and 60 of 80
// tokens): every step's logits must be bitwise those of a run that never moved.
void expectMigrationsBitwiseInvisible(const std::string& path, const std::string& second, const char* what) {
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 3u);
  const std::vector<std::vector<int32_t>> prompts{goldens[0].promptTokens, goldens[1].promptTokens,
                                                  goldens[2].promptTokens};
  auto ref = load(path, {"gpu"});
  const MigratedRun want = runWithMigrations(*ref.model, prompts, 80, {});
  auto m = load(path, {"gpu", second}, std::vector<int>(size_t(ref.model->unitCount()), 0));
  Device* first = m.devices[0].get();
  Device* other = m.devices[1].get();
  const MigratedRun got =
      runWithMigrations(*m.model, prompts, 80, {{20, "", other}, {40, "", first}, {60, "1-2", other}});
  EXPECT_EQ(got.tokens, want.tokens);
  expectBitwiseSameLogits(got, want);
  ASSERT_EQ(got.stats.size(), 3u);
  for (size_t i = 0; i < got.stats.size(); i++) {
    EXPECT_EQ(got.stats[i].recomputedTokens, 0);
    EXPECT_TRUE(got.poolsBalanced[i]);
    std::printf("%s migration %zu %s: %d units, pause %.3f ms, %zu B in the pause\n", testedBackend().name, i, what,
                got.stats[i].units, got.stats[i].pauseMs, got.stats[i].bytesInPause);
  }
}

// Between two GPUs of one backend (cuda:0 and cuda:1 on the two-GPU machine) the kernels are the
// same deterministic code.
TEST_P(GpuModels, LayersMigrateBetweenTwoGpusMidReplyWithBitwiseIdenticalLogits) {
  JITLLM_REQUIRE_TWO_GPUS_AND_STORIES(path);
  expectMigrationsBitwiseInvisible(path, "gpu1", "between two GPUs");
}

// The same between two devices of one GPU (two instances of device 0, as on a one-GPU machine):
// the device-to-device path of the backend (CUDA: gather, peer copy, scatter) or the host's.
TEST_P(GpuModels, LayersMigrateBetweenTwoDevicesOfOneGpuMidReplyWithBitwiseIdenticalLogits) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  expectMigrationsBitwiseInvisible(path, "gpu", "between two devices of one GPU");
}

// A model larger than its device streams blocks through two slots of device memory, the next
// block's upload overlapping this one's ops. Same bytes, same kernels: every logit of a prefill and
// of a token-by-token decode is the resident model's, bit for bit.
TEST_P(GpuModels, StreamedBlocksGiveTheResidentModelsLogitsBitwise) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 1u);
  const std::vector<int32_t>& ids = goldens[0].promptTokens;
  auto resident = load(path, {"gpu"});
  const auto want = scoreAll(*resident.model, ids);
  const auto wantTokens = greedy(*resident.model, ids, 40);
  resident.model.reset();
  resident.devices.clear();

  Loaded streamed;
  streamed.devices.push_back(testedBackend().make(0));
  runtime::ModelLoadOptions o;
  o.devices = {streamed.devices[0].get()};
  o.streamed = {false, true, true, true, true, true, false};
  streamed.model = runtime::Model::load(path, o);
  for (int u = 1; u <= 5; u++) EXPECT_TRUE(streamed.model->unitInfo(u).streamed) << u;
  const auto got = scoreAll(*streamed.model, ids);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
  EXPECT_EQ(greedy(*streamed.model, ids, 40), wantTokens);
}

// An idle session's KV parked in host RAM (the scheduler's answer to memory pressure) and brought
// back: the GPU's pages are freed meanwhile, and the conversation continues with every logit
// bitwise what it would have been - through the backend's own gather and scatter.
TEST_P(GpuModels, AnIdleSessionsKvParkedInHostRamContinuesBitwise) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 1u);
  auto gpu = load(path, {"gpu"});
  runtime::Model& model = *gpu.model;
  const int64_t V = model.config().vocabSize;
  // Greedy decoding of `steps` tokens from `tokens` (its last token not yet fed); every logit kept.
  auto decode = [&](runtime::Session& session, std::vector<int32_t>& tokens, int steps, std::vector<float>& logits) {
    for (int i = 0; i < steps; i++) {
      const size_t fed = size_t(session.length());
      const size_t before = logits.size();
      const runtime::SequenceInput in{&session, {tokens.data() + fed, tokens.size() - fed}, false};
      model.forward({&in, 1}, logits);
      tokens.push_back(argmax(logits.data() + before, V));
    }
  };
  std::vector<int32_t> wantTokens = goldens[0].promptTokens, tokens = wantTokens;
  std::vector<float> want, got;
  auto reference = model.createSession(256);
  decode(*reference, wantTokens, 40, want);
  reference.reset();

  auto session = model.createSession(256);
  decode(*session, tokens, 20, got);
  const runtime::HostKv parked(*session);
  EXPECT_TRUE(runtime::holdsDeviceMemory(*session));
  session.reset();
  EXPECT_EQ(pagesInUse(model), 0u) << "the device's KV pages went back";
  session = parked.restore(model);
  decode(*session, tokens, 20, got);
  EXPECT_EQ(tokens, wantTokens);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

// The scheduler's fill-up on real hardware: device 0 is filled (its memory really allocated, as
// another program would), the pressure policy - fed the device's own accounting - moves the busy
// model's layers to device 1, and the live migration carries that out mid-reply with every step's
// logits bitwise those of a run that never moved.
TEST_P(GpuModels, FillingTheFirstGpuMovesTheBusyModelsLayersToTheSecond) {
  JITLLM_REQUIRE_TWO_GPUS_AND_STORIES(path);
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 2u);
  const std::vector<std::vector<int32_t>> prompts{goldens[0].promptTokens, goldens[1].promptTokens};
  auto ref = load(path, {"gpu"});
  const MigratedRun want = runWithMigrations(*ref.model, prompts, 60, {});
  const size_t units = size_t(ref.model->unitCount());
  ref.model.reset();
  ref.devices.clear();
  auto m = load(path, {"gpu", "gpu1"}, std::vector<int>(units, 0));
  Device& gpu0 = *m.devices[0];
  Device& gpu1 = *m.devices[1];
  // Fill device 0 to 97 % of what it may hand out.
  const size_t budget = gpu0.info().memoryBudget;
  const size_t fill = budget / 100 * 97 - std::min(gpu0.memoryUsed(), budget / 100 * 97);
  const auto filled = std::chrono::steady_clock::now();
  auto filler = gpu0.allocate(fill);
  std::printf("%s: filled %.1f GiB of %.1f GiB in %.0f ms\n", gpu0.info().id.str().c_str(), double(fill) / (1 << 30),
              double(budget) / (1 << 30),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - filled).count());

  policies::Snapshot s;
  for (Device* d : {&gpu0, &gpu1}) {
    policies::DeviceState state;
    state.id = d->info().id;
    state.memoryTotal = d->info().memoryBudget;
    state.memoryUsed = d->memoryUsed();
    state.speed = 10;
    s.devices.push_back(state);
  }
  policies::ModelState model;
  model.name = "stories";
  model.activeSessions = int(prompts.size());  // busy: its layers move rather than page out
  for (int u = 0; u < m.model->unitCount(); u++) {
    const runtime::UnitInfo info = m.model->unitInfo(u);
    model.units.push_back(
        {m.model->unitName(u), info.device->info().id, info.weightBytes, std::nullopt, info.weightBytes});
  }
  s.models.push_back(model);
  policies::PressurePolicy pressure({});
  const std::vector<policies::Action> plan = pressure.plan(s);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].kind, policies::ActionKind::kMigrate);
  EXPECT_EQ(plan[0].target, gpu1.info().id);
  EXPECT_NE(plan[0].reason.find(gpu0.info().id.str() + " at 9"), std::string::npos) << plan[0].reason;
  std::printf("plan: %s units %d-%d -> %s (%s)\n", plan[0].model.c_str(), plan[0].first, plan[0].last,
              plan[0].target->str().c_str(), plan[0].reason.c_str());

  const std::string range = std::to_string(plan[0].first) + "-" + std::to_string(plan[0].last);
  const MigratedRun got = runWithMigrations(*m.model, prompts, 60, {{20, range == "0-6" ? "" : range, &gpu1}});
  filler.reset();
  ASSERT_EQ(got.stats.size(), 1u);
  EXPECT_EQ(got.stats[0].recomputedTokens, 0);
  EXPECT_EQ(got.tokens, want.tokens);
  expectBitwiseSameLogits(got, want);
  for (int u = 0; u < m.model->unitCount(); u++) EXPECT_EQ(&m.model->unitDevice(u), &gpu1) << u;
  std::printf("%s -> %s under pressure: pause %.3f ms, %zu B in the pause\n", gpu0.info().id.str().c_str(),
              gpu1.info().id.str().c_str(), got.stats[0].pauseMs, got.stats[0].bytesInPause);
}

TEST_P(GpuModels, TinyQ4KMLayersMigrateBetweenCpuAndGpuMidReplyWithoutChangingAToken) {
  JITLLM_REQUIRE_GPU();
  const std::string mix = "q4_k_m";
  const auto shape = tools::findShape("tiny");
  if (!std::filesystem::exists(sharedPath(shape->vocabFile))) GTEST_SKIP() << "no " << sharedPath(shape->vocabFile);
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("jitllm-" + std::string(testedBackend().name) + "-migrate-tiny-" + std::to_string(getpid()) + ".gguf"))
          .string();
  tools::writeRandomModel({*shape, *tools::findMix(mix), 7, JITLLM_SHARED_DIR}, path);
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {5, 19, 37}) {
    std::vector<int32_t> p{1};
    while (p.size() < n) p.push_back(int32_t(rng() % 32000));
    prompts.push_back(p);
  }
  expectMigrationKeepsTheCpusTokens(path, prompts);
  std::filesystem::remove(path);
}

// Tensor parallelism over two devices of one GPU (what a one-GPU machine can show of it): a model
// loaded split computes one device's bits, a live split 1 -> 2 -> 1 mid-reply keeps every logit,
// and with partial sums the logits stay within the integer kernels' rounding.
void expectSplitsBitwiseInvisible(const std::string& path, const std::vector<std::vector<int32_t>>& prompts,
                                  int secondGpu = 0) {
  auto ref = load(path, {"gpu"});
  const MigratedRun want = runWithMigrations(*ref.model, prompts, 60, {});
  const std::vector<float> wantScores = scoreAll(*ref.model, prompts[2]);

  Loaded split;
  runtime::ModelLoadOptions o;
  for (int i = 0; i < 2; i++) {
    split.devices.push_back(testedBackend().make(i == 0 ? 0 : secondGpu));
    o.devices.push_back(split.devices.back().get());
  }
  o.tensorParallel = 2;
  split.model = runtime::Model::load(path, o);
  ASSERT_EQ(split.model->unitInfo(1).shards.size(), 2u);
  const std::vector<float> scores = scoreAll(*split.model, prompts[2]);
  ASSERT_EQ(scores.size(), wantScores.size());
  EXPECT_EQ(0, std::memcmp(scores.data(), wantScores.data(), scores.size() * sizeof(float))) << "prefill, split";
  const MigratedRun loadedSplit = runWithMigrations(*split.model, prompts, 60, {});
  EXPECT_EQ(loadedSplit.tokens, want.tokens);
  expectBitwiseSameLogits(loadedSplit, want);

  auto m = load(path, {"gpu", secondGpu ? "gpu1" : "gpu"}, std::vector<int>(size_t(ref.model->unitCount()), 0));
  Device* first = m.devices[0].get();
  Device* other = m.devices[1].get();
  MigrationPoint up{15, "", nullptr, true, {first, other}}, down{40, "", nullptr, true, {first}};
  const MigratedRun got = runWithMigrations(*m.model, prompts, 60, {up, down});
  EXPECT_EQ(got.tokens, want.tokens);
  expectBitwiseSameLogits(got, want);
  ASSERT_EQ(got.splitStats.size(), 2u);
  for (size_t i = 0; i < got.splitStats.size(); i++) {
    EXPECT_EQ(got.splitStats[i].recomputedTokens, 0);
    EXPECT_TRUE(got.poolsBalanced[i]);
    std::printf("%s split %s -> %s: %d blocks, pause %.3f ms, %zu B re-laid before, %zu B in the pause\n",
                testedBackend().name, got.splitStats[i].from.c_str(), got.splitStats[i].to.c_str(),
                got.splitStats[i].units, got.splitStats[i].pauseMs, got.splitStats[i].bytesPrecopied,
                got.splitStats[i].bytesInPause);
  }
  EXPECT_EQ(pagesInUse(*m.model), 0u);

  Loaded sums;
  o.devices.clear();
  for (int i = 0; i < 2; i++) {
    sums.devices.push_back(testedBackend().make(i == 0 ? 0 : secondGpu));
    o.devices.push_back(sums.devices.back().get());
  }
  o.partialSums = true;
  sums.model = runtime::Model::load(path, o);
  const double e = nmse(scoreAll(*sums.model, prompts[2]), wantScores);
  std::printf("%s split with partial sums: NMSE %.3e against one device\n", testedBackend().name, e);
  EXPECT_LE(e, 2e-8);
}

TEST_P(GpuModels, BlocksSplitOverTwoDevicesOfOneGpuComputeOneDevicesBitsAndSwitchLive) {
  JITLLM_REQUIRE_GPU();
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 3u);
  expectSplitsBitwiseInvisible(path, {goldens[0].promptTokens, goldens[1].promptTokens, goldens[2].promptTokens});
}

// The same over two GPUs (the two-GPU machine): shard outputs and hidden states cross by peer copies.
TEST_P(GpuModels, BlocksSplitOverTwoGpusComputeOneGpusBitsAndSwitchLive) {
  JITLLM_REQUIRE_TWO_GPUS_AND_STORIES(path);
  const auto goldens = readGreedyGoldens();
  ASSERT_GE(goldens.size(), 3u);
  expectSplitsBitwiseInvisible(path, {goldens[0].promptTokens, goldens[1].promptTokens, goldens[2].promptTokens}, 1);
}

TEST_P(GpuModels, TinyQ4KMBlocksSplitOverTwoDevicesOfOneGpuComputeOneDevicesBits) {
  JITLLM_REQUIRE_GPU();
  const auto shape = tools::findShape("tiny");
  if (!std::filesystem::exists(sharedPath(shape->vocabFile))) GTEST_SKIP() << "no " << sharedPath(shape->vocabFile);
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("jitllm-" + std::string(testedBackend().name) + "-split-tiny-" + std::to_string(getpid()) + ".gguf"))
          .string();
  tools::writeRandomModel({*shape, *tools::findMix("q4_k_m"), 7, JITLLM_SHARED_DIR}, path);
  expectSplitsBitwiseInvisible(path, prompts(32000));
  std::filesystem::remove(path);
}

// A prompt fed on the prompt path (SequenceInput::promptTokens: fp16 tensor cores on CUDA) leaves
// the same KV whatever its chunks, so the logits after it - from its last token, on the decode
// path - have the same bits fed whole or in chunks of 7, 13 and 19; and they stay as close to the
// CPU's as decode's do (within NMSE 1e-5; printed).
TEST_P(GpuTinyModels, APromptOnThePromptPathGivesTheSameBitsHoweverItIsChunked) {
  JITLLM_REQUIRE_GPU();
  const std::string mix = GetParam();
  std::string skip;
  const std::string path = writeTinyModel(mix, skip);
  if (path.empty()) GTEST_SKIP() << skip;
  auto gpu = load(path, {"gpu"});
  auto cpu = load(path, {"cpu"});
  std::filesystem::remove(path);
  const std::vector<int32_t> ids = randomIds(40, 23, cpu.model->config().vocabSize);
  // Feeds ids in chunks (sizes, then the last token alone), all but the last as prompt tokens;
  // returns the last token's logits.
  const auto feed = [&](runtime::Model& model, const std::vector<size_t>& chunks, bool promptPath) {
    auto session = model.createSession(int64_t(ids.size()));
    std::vector<float> logits;
    size_t at = 0;
    for (size_t n : chunks) {
      runtime::SequenceInput in{session.get(), {ids.data() + at, n}, false, promptPath ? int64_t(n) : 0};
      logits.clear();
      model.forward({&in, 1}, logits);
      at += n;
    }
    runtime::SequenceInput last{session.get(), {ids.data() + at, ids.size() - at}, false, 0};
    logits.clear();
    model.forward({&last, 1}, logits);
    return logits;
  };
  const auto whole = feed(*gpu.model, {39}, true);
  EXPECT_EQ(whole, feed(*gpu.model, {7, 13, 19}, true));
  const auto wholeTogether = [&] {  // the prompt and its last token in one input
    auto session = gpu.model->createSession(int64_t(ids.size()));
    std::vector<float> logits;
    runtime::SequenceInput in{session.get(), ids, false, 39};
    gpu.model->forward({&in, 1}, logits);
    return logits;
  }();
  EXPECT_EQ(whole, wholeTogether);
  const auto want = feed(*cpu.model, {39}, false);
  const double e = nmse(whole, want), decodeE = nmse(feed(*gpu.model, {39}, false), want);
  std::printf("tiny %-7s %s prompt path vs cpu: nmse %.3e (decode path %.3e)\n", mix.c_str(), testedBackend().name, e,
              decodeE);
  EXPECT_LE(e, 1e-5);
}

// The serving guarantee on the prompt path: sequences whose prompts take it (StepLoop::Options::
// promptPathMinTokens: 128 by default, 0 for every prompt) get the same greedy tokens in a loop of
// their own as together in any batch, their prompts fed in chunks of 3 beside the others' decoding
// or whole - and the prompts of 128 tokens and more among them take the path by default.
TEST_P(GpuTinyModels, SequencesOnThePromptPathGetTheirTokensAloneInAnyBatch) {
  JITLLM_REQUIRE_GPU();
  // Backends without a prompt path feed prompts on decode's kernels, whose batching
  // StepLoopBatching covers (and lavapipe would take minutes over these steps).
  if (std::string_view(testedBackend().name) != "cuda")
    GTEST_SKIP() << "the " << testedBackend().name << " backend has no prompt path";
  const std::string mix = GetParam();
  std::string skip;
  const std::string path = writeTinyModel(mix, skip);
  if (path.empty()) GTEST_SKIP() << skip;
  auto gpu = load(path, {"gpu"});
  std::filesystem::remove(path);
  runtime::Model& model = *gpu.model;
  std::mt19937 rng(31);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t length : {size_t(150), size_t(9), size_t(200), size_t(128), size_t(17), size_t(140)}) {
    std::vector<int32_t> p(length);
    for (auto& id : p) id = int32_t(1 + rng() % uint32_t(model.config().vocabSize - 1));
    prompts.push_back(std::move(p));
  }
  struct Collector final : runtime::SequenceListener {
    std::vector<int32_t> tokens;
    void generated(int32_t token, std::string_view, std::span<const float>) override { tokens.push_back(token); }
  };
  const auto request = [&](size_t i) {
    runtime::SequenceRequest r;
    r.prompt = prompts[i];
    r.maxTokens = 8;
    r.stopAtEndOfGeneration = false;
    return r;
  };
  // Sequences [0, n) in one loop: half at once, the others three steps later.
  const auto run = [&](std::vector<size_t> which, int64_t chunk, int64_t minTokens) {
    runtime::StepLoop::Options o;
    o.prefillChunk = chunk;
    o.promptPathMinTokens = minTokens;
    runtime::StepLoop loop(model, o);
    std::vector<Collector> out(which.size());
    for (size_t j = 0; j < which.size(); j++) {
      if (j == (which.size() + 1) / 2) {
        for (int s = 0; s < 3; s++) loop.step();
      }
      loop.add(model.createSession(256), request(which[j]), &out[j]);
    }
    while (loop.step()) {
    }
    for (auto& ended : loop.takeEnded()) EXPECT_FALSE(ended->error()) << ended->error()->what();
    std::vector<std::vector<int32_t>> tokens;
    for (auto& c : out) tokens.push_back(c.tokens);
    return tokens;
  };
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
  }
}

}  // namespace
}  // namespace jitllm::testing
