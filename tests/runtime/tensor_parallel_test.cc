// Tensor parallelism on the CPU: blocks split over cpu:0..cpu:3 (heads and FFN rows per device),
// at load and switched live mid-reply. A split block computes one device's bits, so logits and
// tokens equal one device's exactly, a live 1 -> 2 -> 1 switch gives a reply that never switched
// without recomputing a token, and KV parked under one split comes back under another. With
// partial sums (the output and down projections split too) only the sums are reassociated:
// within 1e-12 on float weights; on the integer kernels the activation rounding downstream
// turns that into ~1e-9, the integer path's own error.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>

#include "base/error.h"
#include "engine/kv/host_kv.h"
#include "engine/kv/kv_head_split.h"
#include "engine/runtime/live_migration.h"
#include "engine/runtime/tensor_parallel_switch.h"
#include "kernels/cpu/cpu_device.h"
#include "tests/runtime/migration_harness.h"
#include "tests/runtime/test_support.h"

namespace jitllm::testing {
namespace {

using runtime::TensorParallelOptions;
using runtime::TensorParallelSwitch;

// `devices` CPU devices; every unit on cpu:0, blocks split over the first `split`.
LoadedModel loadSplit(const std::string& path, int devices, int split, bool partialSums = false) {
  LoadedModel m;
  runtime::ModelLoadOptions options;
  for (int i = 0; i < devices; i++) {
    cpu::CpuDeviceOptions o;
    o.index = i;
    o.threads = 1;
    m.devices.push_back(std::make_unique<cpu::CpuDevice>(o));
    options.devices.push_back(m.devices.back().get());
  }
  options.tensorParallel = split;
  options.partialSums = partialSums;
  if (split == 1)
    options.placement.assign(size_t(runtime::ModelConfig::fromGguf(*gguf::GgufFile::open(path)).layers + 2), 0);
  m.model = runtime::Model::load(path, options);
  return m;
}

std::vector<Device*> firstDevices(const LoadedModel& m, int n) {
  std::vector<Device*> out;
  for (int i = 0; i < n; i++) out.push_back(m.devices[size_t(i)].get());
  return out;
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return num / den;
}

void expectBitwiseEqual(const MigratedRun& a, const MigratedRun& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < a.logits.size(); s++) {
    ASSERT_EQ(0, std::memcmp(a.logits[s].data(), b.logits[s].data(), a.logits[s].size() * sizeof(float)))
        << "logits differ at step " << s;
  }
}

// Float weights keep the reassociation's 1e-14; the integer kernels' rounding of the next
// activations makes it their own error's size.
double partialSumsBound(const std::string& which) {
  return which == "stories260K" || which.find("f32") != std::string::npos ? 1e-12 : 2e-8;
}

class TensorParallelOnCpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string which = GetParam();
    if (const std::string missing = missingFileFor(which); !missing.empty()) GTEST_SKIP() << "no " << missing;
    path_ = modelPath(which);
  }
  // The most devices the model's KV heads split over, up to four.
  int widest(const runtime::Model& m) const {
    int k = 4;
    while (m.config().kvHeads % k != 0 || m.config().feedForward % k != 0) k /= 2;
    return k;
  }
  std::string path_;
};

// Every position's logits with all of `ids` fed as prompt tokens (the devices' prompt path:
// on the CPU, byte activations for the quantized types).
std::vector<float> scoreAllOnThePromptPath(runtime::Model& model, const std::vector<int32_t>& ids) {
  auto session = model.createSession(int64_t(ids.size()));
  std::vector<float> logits;
  runtime::SequenceInput in{session.get(), ids, true, int64_t(ids.size())};
  model.forward({&in, 1}, logits);
  return logits;
}

TEST_P(TensorParallelOnCpu, SplitBlocksGiveOneDevicesLogitsAndTokens) {
  LoadedModel one = loadSplit(path_, 4, 1);
  const auto p = prompts(one.model->config().vocabSize);
  const std::vector<float> reference = scoreAll(*one.model, p[2]);
  const std::vector<float> promptReference = scoreAllOnThePromptPath(*one.model, p[2]);
  const MigratedRun undisturbed = runWithMigrations(*one.model, p, 24, {});
  for (int k = 2; k <= widest(*one.model); k *= 2) {
    SCOPED_TRACE(k);
    LoadedModel split = loadSplit(path_, 4, k);
    const runtime::UnitInfo info = split.model->unitInfo(1);
    ASSERT_EQ(info.shards.size(), size_t(k));
    EXPECT_EQ(info.device, split.devices[0].get());
    EXPECT_EQ(info.shards[size_t(k - 1)], split.devices[size_t(k - 1)].get());
    EXPECT_TRUE(split.model->unitInfo(0).shards.empty());  // the embedding and head are not split
    const std::vector<float> logits = scoreAll(*split.model, p[2]);
    ASSERT_EQ(logits.size(), reference.size());
    EXPECT_EQ(0, std::memcmp(logits.data(), reference.data(), logits.size() * sizeof(float)));
    // Prompt tokens too: every shard takes the prompt path for the rows it computes.
    const std::vector<float> promptLogits = scoreAllOnThePromptPath(*split.model, p[2]);
    EXPECT_EQ(0, std::memcmp(promptLogits.data(), promptReference.data(), promptLogits.size() * sizeof(float)))
        << "a split block's prompt rows differ from one device's";
    expectBitwiseEqual(runWithMigrations(*split.model, p, 24, {}), undisturbed);
    // KV of split blocks comes from the shards' pools: each holds its share of the heads.
    auto s = split.model->createSession(64);
    s->reserve(20);
    EXPECT_EQ(s->shardsOf(0), k);
    EXPECT_EQ(s->layerPool(s->tableOf(0, k - 1)).layout().kvHeads, split.model->config().kvHeads / k);
    EXPECT_EQ(&s->layerPool(s->tableOf(0, k - 1)).device(), split.devices[size_t(k - 1)].get());
  }
}

TEST_P(TensorParallelOnCpu, LiveSwitchOneToTwoToOneMidReplyKeepsEveryToken) {
  LoadedModel ref = loadSplit(path_, 2, 1);
  const auto p = prompts(ref.model->config().vocabSize);
  const MigratedRun undisturbed = runWithMigrations(*ref.model, p, 60, {});

  LoadedModel m = loadSplit(path_, 2, 1);
  const std::vector<Device*> two = firstDevices(m, 2), one = firstDevices(m, 1);
  MigrationPoint up{15, "", nullptr, true, two, false}, down{35, "", nullptr, true, one, false};
  const MigratedRun switched = runWithMigrations(*m.model, p, 60, {up, down});
  expectBitwiseEqual(switched, undisturbed);
  ASSERT_EQ(switched.splitStats.size(), 2u);
  for (const auto& st : switched.splitStats) {
    EXPECT_EQ(st.units, int(m.model->config().layers));
    EXPECT_EQ(st.recomputedTokens, 0);
    EXPECT_EQ(st.sessions, 3);
    EXPECT_GT(st.bytesPrecopied, 0u) << "sealed pages are re-laid while the replies stream";
  }
  EXPECT_EQ(switched.splitStats[0].from, "cpu:0");
  EXPECT_EQ(switched.splitStats[0].to, "cpu:0+cpu:1");
  for (bool balanced : switched.poolsBalanced) EXPECT_TRUE(balanced);
  EXPECT_TRUE(m.model->unitInfo(1).shards.empty());
  EXPECT_EQ(m.model->kvPool(*m.devices[1], 2).pagesInUse(), 0u);
}

TEST_P(TensorParallelOnCpu, WithoutPrecopyTheWholeKvIsReLaidInThePause) {
  LoadedModel ref = loadSplit(path_, 2, 1);
  const auto p = prompts(ref.model->config().vocabSize);
  const MigratedRun undisturbed = runWithMigrations(*ref.model, p, 20, {});
  LoadedModel m = loadSplit(path_, 2, 1);
  MigrationPoint up{8, "", nullptr, false, firstDevices(m, 2), false};
  const MigratedRun switched = runWithMigrations(*m.model, p, 20, {up});
  expectBitwiseEqual(switched, undisturbed);
  ASSERT_EQ(switched.splitStats.size(), 1u);
  EXPECT_EQ(switched.splitStats[0].bytesPrecopied, 0u);
  EXPECT_GT(switched.splitStats[0].bytesInPause, 0u);
}

// Parked under a split, restored on one device (and the other way round): the same KV, re-laid.
TEST_P(TensorParallelOnCpu, KvParkedUnderOneSplitComesBackUnderAnother) {
  LoadedModel m = loadSplit(path_, 2, 2);
  const auto p = prompts(m.model->config().vocabSize);
  const int64_t V = m.model->config().vocabSize;
  auto session = m.model->createSession(256);
  std::vector<float> logits;
  runtime::SequenceInput in{session.get(), p[2], false};
  m.model->forward({&in, 1}, logits);
  const runtime::HostKv parked(*session);
  EXPECT_EQ(parked.bytes() % m.model->kvLayout().pageBytes(), 0u);
  session.reset();
  EXPECT_EQ(pagesInUse(*m.model), 0u);

  // What the split model says next, from the KV it has.
  auto again = parked.restore(*m.model);
  const int32_t next = argmax(logits.data(), V);
  std::vector<float> split, joined;
  runtime::SequenceInput step{again.get(), {&next, 1}, false};
  m.model->forward({&step, 1}, split);
  again.reset();

  TensorParallelOptions o;
  o.units = runtime::parseUnitRange("", int(m.model->config().layers));
  o.devices = firstDevices(m, 1);
  TensorParallelSwitch toOne(*m.model, o);
  toOne.commit();
  toOne.releaseSource();
  auto restored = parked.restore(*m.model);
  EXPECT_EQ(restored->shardsOf(0), 1);
  runtime::SequenceInput step1{restored.get(), {&next, 1}, false};
  m.model->forward({&step1, 1}, joined);
  ASSERT_EQ(joined.size(), split.size());
  EXPECT_EQ(0, std::memcmp(joined.data(), split.data(), split.size() * sizeof(float)));
}

// Partial sums: the output and down projections split too, the sums reassociated.
TEST_P(TensorParallelOnCpu, PartialSumsStayWithinTheirRounding) {
  LoadedModel one = loadSplit(path_, 2, 1);
  const auto p = prompts(one.model->config().vocabSize);
  const std::vector<float> reference = scoreAll(*one.model, p[2]);
  LoadedModel split = loadSplit(path_, 2, 2, true);
  const std::vector<float> logits = scoreAll(*split.model, p[2]);
  const double e = nmse(logits, reference);
  std::printf("%s with partial sums over 2 devices: NMSE %.3e\n", GetParam(), e);
  EXPECT_LE(e, partialSumsBound(GetParam()));
  // A live switch into partial sums and back keeps the bound at every step.
  const MigratedRun undisturbed = runWithMigrations(*one.model, p, 30, {});
  LoadedModel m = loadSplit(path_, 2, 1);
  MigrationPoint up{8, "", nullptr, true, firstDevices(m, 2), true}, down{20, "", nullptr, true, firstDevices(m, 1)};
  const MigratedRun switched = runWithMigrations(*m.model, p, 30, {up, down});
  ASSERT_EQ(switched.logits.size(), undisturbed.logits.size());
  for (size_t s = 0; s < switched.logits.size(); s++) {
    EXPECT_LE(nmse(switched.logits[s], undisturbed.logits[s]), partialSumsBound(GetParam())) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelOnCpu,
                         ::testing::Values("stories260K", "micro/f32", "micro/q8_0", "tiny/q4_k_m",
                                           "qwen3-micro/q4_k_m", "phi3-micro/q4_k_m", "gemma3-micro/q4_k_m",
                                           "granite-micro/q4_k_m"),
                         [](const auto& info) {
                           std::string name;
                           for (char c : std::string(info.param)) {
                             if (std::isalnum(static_cast<unsigned char>(c))) name += c;
                           }
                           return name;
                         });

TEST(TensorParallel, KvPagesReLayByHeadsAndBack) {
  const KvLayout whole{4, 4, 3, KvPrecision::kF32};
  std::vector<uint8_t> pages(2 * whole.pageBytes());
  for (size_t i = 0; i < pages.size(); i++) pages[i] = uint8_t(i * 7 + 1);
  const KvLayout half = runtime::shardLayout(whole, 2);
  EXPECT_EQ(half.kvHeads, 2);
  std::vector<uint8_t> a(2 * half.pageBytes()), b(2 * half.pageBytes()), back(pages.size());
  const uint8_t* from[1] = {pages.data()};
  uint8_t* to[2] = {a.data(), b.data()};
  runtime::relayHeads(whole, 2, from, to);
  // Shard 1 holds heads 2 and 3 of token 1's K: bytes (1 * 4 + 2) * 12 .. of the whole page.
  EXPECT_EQ(0, std::memcmp(b.data() + 1 * half.tokenBytes(), pages.data() + 1 * whole.tokenBytes() + 2 * 12, 24));
  const uint8_t* parts[2] = {a.data(), b.data()};
  uint8_t* out[1] = {back.data()};
  runtime::relayHeads(whole, 2, parts, out);
  EXPECT_EQ(pages, back);
  EXPECT_THROW(runtime::shardLayout(whole, 3), Error);
}

TEST(TensorParallel, RefusesWhatDoesNotSplitAndMovesOfSplitBlocks) {
  const std::string path = modelPath("micro/q8_0");  // 2 KV heads
  EXPECT_THROW(
      {
        try {
          loadSplit(path, 4, 4);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("do not split over 4 devices"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  LoadedModel m = loadSplit(path, 2, 2);
  runtime::MigrationOptions move;
  move.units = runtime::parseUnitRange("1", int(m.model->config().layers));
  move.target = m.devices[1].get();
  EXPECT_THROW(runtime::LiveMigration(*m.model, move), Error);
  TensorParallelOptions twice;
  twice.units = move.units;
  twice.devices = {m.devices[1].get(), m.devices[1].get()};
  EXPECT_THROW(TensorParallelSwitch(*m.model, twice), Error);
}

// A switch destroyed before its commit leaves the model as it was, every page it took returned.
TEST(TensorParallel, AnAbortedSwitchLeavesNothingBehind) {
  LoadedModel m = loadSplit(modelPath("tiny/q4_k_m"), 2, 1);
  const auto p = prompts(m.model->config().vocabSize);
  auto session = m.model->createSession(256);
  std::vector<float> logits;
  runtime::SequenceInput in{session.get(), p[2], false};
  m.model->forward({&in, 1}, logits);
  const size_t held = pagesInUse(*m.model);
  {
    TensorParallelOptions o;
    o.units = runtime::parseUnitRange("", int(m.model->config().layers));
    o.devices = firstDevices(m, 2);
    TensorParallelSwitch s(*m.model, o);
    while (!s.prepareStep()) {
    }
    EXPECT_GT(pagesInUse(*m.model), held);
  }
  EXPECT_EQ(pagesInUse(*m.model), held);
  EXPECT_TRUE(m.model->unitInfo(1).shards.empty());
  EXPECT_EQ(session->shardsOf(0), 1);
}

}  // namespace
}  // namespace jitllm::testing
