// Live migration on the CPU: units move between two CPU devices (cpu:0, cpu:1) while three
// sessions decode, and every step's logits must be bitwise those of a run that never moved.
// Failures (target out of memory, target gone, cancel) must leave the model running where it was
// with nothing leaked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "base/error.h"
#include "engine/kv/host_kv.h"
#include "engine/runtime/live_migration.h"
#include "engine/runtime/unit_range.h"
#include "kernels/cpu/cpu_device.h"
#include "tests/runtime/migration_harness.h"
#include "tests/runtime/test_support.h"
#include "tools/random_model.h"

namespace jitllm::testing {
namespace {

using runtime::LiveMigration;
using runtime::MigrationOptions;
using runtime::parseUnitRange;

// A model with every unit on cpu:0 and a second device cpu:1 to move to.
LoadedModel loadOnCpu0(const std::string& path, size_t cpu1Budget = 0) {
  LoadedModel m;
  runtime::ModelLoadOptions options;
  for (int i = 0; i < 2; i++) {
    cpu::CpuDeviceOptions o;
    o.index = i;
    o.threads = 2;
    if (i == 1) o.memoryBudget = cpu1Budget;
    m.devices.push_back(std::make_unique<cpu::CpuDevice>(o));
    options.devices.push_back(m.devices.back().get());
  }
  m.model = runtime::Model::load(path, options);
  JITLLM_ASSERT(m.model->unitCount() > 0);
  options.placement.assign(size_t(m.model->unitCount()), 0);
  m.model = runtime::Model::load(path, options);
  return m;
}

void expectBitwiseEqual(const MigratedRun& a, const MigratedRun& b) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < a.logits.size(); s++) {
    ASSERT_EQ(a.logits[s].size(), b.logits[s].size());
    ASSERT_EQ(0, std::memcmp(a.logits[s].data(), b.logits[s].data(), a.logits[s].size() * sizeof(float)))
        << "logits differ at step " << s;
  }
  EXPECT_EQ(a.tokens, b.tokens);
}

class LiveMigrationOnCpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string which = GetParam();
    if (const std::string missing = missingFileFor(which); !missing.empty()) GTEST_SKIP() << "no " << missing;
    path_ = modelPath(which);
  }
  std::string path_;
};

TEST_P(LiveMigrationOnCpu, AllLayersThereAndBackThenAPartialRangeChangeNoLogitBitwise) {
  LoadedModel ref = loadOnCpu0(path_);
  const auto p = prompts(ref.model->config().vocabSize);
  const MigratedRun undisturbed = runWithMigrations(*ref.model, p, 80, {});

  LoadedModel m = loadOnCpu0(path_);
  Device* cpu0 = m.devices[0].get();
  Device* cpu1 = m.devices[1].get();
  const MigratedRun moved = runWithMigrations(*m.model, p, 80, {{20, "", cpu1}, {40, "", cpu0}, {60, "1-2", cpu1}});
  expectBitwiseEqual(undisturbed, moved);

  ASSERT_EQ(moved.stats.size(), 3u);
  const int units = m.model->unitCount();
  EXPECT_EQ(moved.stats[0].units, units);
  EXPECT_EQ(moved.stats[0].from, "cpu:0");
  EXPECT_EQ(moved.stats[1].units, units);
  EXPECT_EQ(moved.stats[1].from, "cpu:1");
  EXPECT_EQ(moved.stats[2].units, 2);
  for (size_t i = 0; i < moved.stats.size(); i++) {
    const auto& s = moved.stats[i];
    EXPECT_EQ(s.recomputedTokens, 0);
    EXPECT_EQ(s.sessions, 3);
    EXPECT_TRUE(moved.poolsBalanced[i]) << "migration " << i;
    // Sealed pages went before the pause; the pause moved at most the open tail (and what sealed
    // during the last slice) of each session's moving layers.
    EXPECT_GT(s.bytesPrecopied, 0u) << "migration " << i;
    const int layers = i == 2 ? 2 : int(m.model->config().layers);
    EXPECT_LE(s.bytesInPause, size_t(3 * layers * 2) * m.model->kvLayout().pageBytes()) << "migration " << i;
  }
  for (int u = 0; u < units; u++) {
    EXPECT_EQ(&m.model->unitDevice(u), (u == 2 || u == 3) ? cpu1 : cpu0) << m.model->unitName(u);
  }
  // Every session has ended: every page is back and every chunk returned to its device.
  EXPECT_EQ(pagesInUse(*m.model), 0u);
  for (const runtime::KvPagePool* pool : m.model->kvPools()) EXPECT_EQ(pool->pagesReserved(), 0u);
}

// Positions of a session `length` tokens long whose K and V `layer` still holds: all, or in a
// sliding-window layer (gemma3) those from the first page its window still needs.
int64_t heldPositions(const runtime::Model& model, int layer, int64_t length) {
  const runtime::ModelConfig& c = model.config();
  const int64_t pageTokens = model.kvLayout().pageTokens;
  const int64_t window = c.slidingLayer(layer) ? c.slidingWindow : 0;
  return length - int64_t(runtime::firstPageInWindow(window, pageTokens, length)) * pageTokens;
}

// Decodes `session` greedily for `steps` tokens from `tokens` (the last one not yet fed), appending
// what it samples; returns every step's logits.
std::vector<std::vector<float>> decode(runtime::Model& model, runtime::Session& session, std::vector<int32_t>& tokens,
                                       int steps) {
  const int64_t V = model.config().vocabSize;
  std::vector<std::vector<float>> out;
  for (int i = 0; i < steps; i++) {
    const size_t fed = size_t(session.length());
    std::vector<float> logits;
    const runtime::SequenceInput in{&session, {tokens.data() + fed, tokens.size() - fed}, false};
    model.forward({&in, 1}, logits);
    tokens.push_back(argmax(logits.data(), V));
    out.push_back(std::move(logits));
  }
  return out;
}

TEST_P(LiveMigrationOnCpu, ASessionParkedInHostMemoryContinuesBitwiseEvenAfterItsLayersMoved) {
  LoadedModel ref = loadOnCpu0(path_);
  const std::vector<int32_t> prompt = prompts(ref.model->config().vocabSize)[2];
  std::vector<int32_t> refTokens = prompt;
  auto refSession = ref.model->createSession(256);
  const auto refLogits = decode(*ref.model, *refSession, refTokens, 30);

  LoadedModel m = loadOnCpu0(path_);
  std::vector<int32_t> tokens = prompt;
  auto session = m.model->createSession(256);
  auto logits = decode(*m.model, *session, tokens, 12);
  const int64_t length = session->length();
  const runtime::HostKv parked(*session);
  EXPECT_EQ(parked.length(), length);
  EXPECT_EQ(parked.contextLimit(), 256);
  // Every layer's written pages, less those sliding windows freed.
  const int64_t pageTokens = m.model->kvLayout().pageTokens;
  size_t pages = 0;
  for (int l = 0; l < int(m.model->config().layers); l++) {
    pages += size_t((length + pageTokens - 1) / pageTokens -
                    int64_t(runtime::firstPageInWindow(session->layerWindow(l), pageTokens, length)));
  }
  EXPECT_EQ(parked.bytes(), pages * m.model->kvLayout().pageBytes());
  session.reset();
  EXPECT_EQ(pagesInUse(*m.model), 0u);  // the device memory went back

  // While parked, every unit moves to cpu:1: the session comes back on the pools it runs on now.
  MigrationOptions o;
  o.units = parseUnitRange("", int(m.model->config().layers));
  o.target = m.devices[1].get();
  LiveMigration migration(*m.model, o);
  while (!migration.prepareStep()) {
  }
  migration.commit();
  migration.releaseSource();
  session = parked.restore(*m.model);
  EXPECT_EQ(session->length(), length);
  EXPECT_EQ(&session->layerPool(0).device(), m.devices[1].get());
  for (auto& l : decode(*m.model, *session, tokens, 18)) logits.push_back(std::move(l));

  EXPECT_EQ(tokens, refTokens);
  ASSERT_EQ(logits.size(), refLogits.size());
  for (size_t i = 0; i < logits.size(); i++) {
    ASSERT_EQ(0, std::memcmp(logits[i].data(), refLogits[i].data(), logits[i].size() * sizeof(float)))
        << "logits differ at step " << i;
  }
  EXPECT_FALSE(runtime::holdsDeviceMemory(*session));  // CPU pages are host memory already
}

TEST_P(LiveMigrationOnCpu, WithoutPrecopyEveryWrittenTokenMovesInThePause) {
  LoadedModel ref = loadOnCpu0(path_);
  const auto p = prompts(ref.model->config().vocabSize);
  const MigratedRun undisturbed = runWithMigrations(*ref.model, p, 30, {});
  LoadedModel m = loadOnCpu0(path_);
  MigrationPoint point{10, "", m.devices[1].get(), false};
  const MigratedRun moved = runWithMigrations(*m.model, p, 30, {point});
  expectBitwiseEqual(undisturbed, moved);
  ASSERT_EQ(moved.stats.size(), 1u);
  EXPECT_EQ(moved.stats[0].bytesPrecopied, 0u);
  // Between CPU devices the pause copies exactly the written tokens' K and V, in every layer:
  // prompt + decoded tokens before the commit (in a sliding-window layer, those its pages still hold).
  const auto& kv = m.model->kvLayout();
  size_t tokens = 0;
  for (const auto& prompt : p) {
    const int64_t length = int64_t(prompt.size()) + moved.commitSteps[0] - 1;
    for (int l = 0; l < int(m.model->config().layers); l++) tokens += size_t(heldPositions(*m.model, l, length));
  }
  EXPECT_EQ(moved.stats[0].bytesInPause, tokens * 2 * kv.tokenBytes());
}

// One per architecture: llama (stories260K, the tiny shape in Q4_K_M), qwen3, granite, phi3,
// gemma3 (whose sliding layers free pages while the sessions decode, before and during the
// migrations).
INSTANTIATE_TEST_SUITE_P(Models, LiveMigrationOnCpu,
                         ::testing::Values("stories260K", "tiny/q4_k_m", "qwen3-micro/q4_k_m", "granite-micro/q4_k_m",
                                           "phi3-micro/q4_k_m", "gemma3-micro/q4_k_m"),
                         [](const auto& info) {
                           std::string name;
                           for (char c : std::string(info.param)) {
                             if (std::isalnum(static_cast<unsigned char>(c))) name += c;
                           }
                           return name;
                         });

// A Device that forwards to a CPU device until it "vanishes" (unplugged, driver reset): from then
// on every call fails with DISCONNECTED, as a real backend's would.
class VanishingDevice final : public Device {
 public:
  explicit VanishingDevice(int index) {
    cpu::CpuDeviceOptions o;
    o.index = index;
    o.threads = 2;
    inner_ = std::make_unique<cpu::CpuDevice>(o);
    info_ = inner_->info();  // its id, budget and capabilities; the inner device keeps the accounts
  }
  void vanish() { gone_ = true; }

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override { return check().allocate(bytes); }
  std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) override {
    return check().adoptHostBytes(bytes, size);
  }
  void copyFromHost(uint8_t* dst, const void* src, size_t bytes) override { check().copyFromHost(dst, src, bytes); }
  void copyToHost(void* dst, const uint8_t* src, size_t bytes) override { check().copyToHost(dst, src, bytes); }
  void getRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override {
    check().getRows(table, ids, n, out);
  }
  void rmsNorm(const float* x, const float* w, float* out, int64_t rows, int64_t dim, float eps) override {
    check().rmsNorm(x, w, out, rows, dim, eps);
  }
  void matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) override {
    check().matmul(w, x, tokens, y, bias);
  }
  void rope(float* x, int64_t tokens, int heads, int headDim, const int32_t* positions,
            const RopeParams& params) override {
    check().rope(x, tokens, heads, headDim, positions, params);
  }
  void kvStore(const float* k, const float* v, int64_t tokens, const KvSlot* slots, const KvLayout& layout) override {
    check().kvStore(k, v, tokens, slots, layout);
  }
  void attention(const float* q, float* out, const AttentionBatch& batch) override { check().attention(q, out, batch); }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override { check().swiglu(gate, up, out, n); }
  void geglu(const float* gate, const float* up, float* out, int64_t n) override { check().geglu(gate, up, out, n); }
  void add(float* x, const float* y, int64_t n) override { check().add(x, y, n); }
  void scale(float* x, float s, int64_t n) override { check().scale(x, s, n); }

 private:
  Device& check() {
    if (gone_) throw Error(ErrorKind::kDisconnected, info().id.str() + " has gone away");
    return *inner_;
  }
  std::unique_ptr<cpu::CpuDevice> inner_;
  bool gone_ = false;
};

// Steps three sessions by one token each and returns their logits.
std::vector<float> stepAll(runtime::Model& model, std::vector<std::unique_ptr<runtime::Session>>& sessions,
                           std::vector<std::vector<int32_t>>& tokens) {
  std::vector<runtime::SequenceInput> in;
  for (size_t i = 0; i < sessions.size(); i++) {
    const bool prefill = sessions[i]->length() == 0;
    in.push_back({sessions[i].get(),
                  prefill ? std::span<const int32_t>(tokens[i]) : std::span<const int32_t>(&tokens[i].back(), 1),
                  false});
  }
  std::vector<float> logits;
  model.forward(in, logits);
  const int64_t V = model.config().vocabSize;
  for (size_t i = 0; i < sessions.size(); i++) tokens[i].push_back(argmax(logits.data() + int64_t(i) * V, V));
  return logits;
}

// A migration that fails or is cancelled mid-prepare: the model keeps running on cpu:0 with the
// logits of an undisturbed run, and the target holds nothing afterwards.
void expectAbortLeavesNothing(runtime::Model& model, Device& source, Device& target,
                              const std::function<void(LiveMigration&)>& disturb) {
  LoadedModel ref = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  const auto p = prompts(model.config().vocabSize);
  std::vector<std::unique_ptr<runtime::Session>> refSessions, sessions;
  for (size_t i = 0; i < p.size(); i++) {
    refSessions.push_back(ref.model->createSession(256));
    sessions.push_back(model.createSession(256));
  }
  auto refTokens = p, tokens = p;
  for (int step = 0; step < 20; step++) {
    EXPECT_EQ(stepAll(*ref.model, refSessions, refTokens), stepAll(model, sessions, tokens));
  }
  const size_t targetUsedBefore = target.memoryUsed();
  {
    MigrationOptions o;
    o.units = parseUnitRange("", int(model.config().layers));
    o.target = &target;
    o.stepBytes = model.kvLayout().pageBytes();
    LiveMigration migration(model, o);
    disturb(migration);
  }
  EXPECT_EQ(target.memoryUsed(), targetUsedBefore);
  for (const runtime::KvPagePool* pool : model.kvPools()) {
    if (&pool->device() == &target) {
      EXPECT_EQ(pool->pagesInUse(), 0u);
      EXPECT_EQ(pool->pagesReserved(), 0u);
    }
  }
  for (int u = 0; u < model.unitCount(); u++) EXPECT_EQ(&model.unitDevice(u), &source);
  for (int step = 0; step < 20; step++) {
    EXPECT_EQ(stepAll(*ref.model, refSessions, refTokens), stepAll(model, sessions, tokens));
  }
}

class LiveMigrationFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(sharedPath("models/stories260K.gguf"))) GTEST_SKIP() << "no stories260K";
  }
};

TEST_F(LiveMigrationFailures, ATargetOutOfMemoryAbortsAndGenerationCarriesOn) {
  // Room for the warm-up's workspace but not for one chunk of KV pages.
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"), 64 * 1024);
  expectAbortLeavesNothing(*m.model, *m.devices[0], *m.devices[1], [](LiveMigration& migration) {
    try {
      while (!migration.prepareStep()) {
      }
      migration.commit();
      ADD_FAILURE() << "the migration should have run out of memory";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kOverloaded) << e.what();
    }
  });
}

TEST_F(LiveMigrationFailures, AVanishingTargetAbortsAndGenerationCarriesOn) {
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  VanishingDevice target(1);
  expectAbortLeavesNothing(*m.model, *m.devices[0], target, [&](LiveMigration& migration) {
    for (int i = 0; i < 4; i++) migration.prepareStep();
    target.vanish();
    try {
      while (!migration.prepareStep()) {
      }
      migration.commit();
      ADD_FAILURE() << "the migration should have seen its target vanish";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDisconnected) << e.what();
    }
  });
}

TEST_F(LiveMigrationFailures, CancellingDuringPrepareLeavesNothingBehind) {
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  expectAbortLeavesNothing(*m.model, *m.devices[0], *m.devices[1], [](LiveMigration& migration) {
    while (!migration.prepareStep()) {
    }
    EXPECT_GT(migration.stats().bytesPrecopied, 0u);
    // Destroyed without commit: the cancel.
  });
}

TEST_F(LiveMigrationFailures, APageRewrittenAfterItsPrecopyIsCopiedAgain) {
  LoadedModel ref = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  const int64_t V = m.model->config().vocabSize;
  std::mt19937 rng(7);
  std::vector<int32_t> first(40), second(30);
  for (auto& t : first) t = int32_t(rng() % uint32_t(V));
  for (auto& t : second) t = int32_t(rng() % uint32_t(V));
  auto a = ref.model->createSession(256);
  auto b = m.model->createSession(256);
  std::vector<float> la, lb;
  auto feed = [&](runtime::Model& model, runtime::Session& s, const std::vector<int32_t>& ids,
                  std::vector<float>& out) {
    out.clear();
    runtime::SequenceInput in{&s, ids, false};
    model.forward({&in, 1}, out);
  };
  feed(*ref.model, *a, first, la);
  feed(*m.model, *b, first, lb);
  MigrationOptions o;
  o.units = parseUnitRange("", int(m.model->config().layers));
  o.target = m.devices[1].get();
  LiveMigration migration(*m.model, o);
  while (!migration.prepareStep()) {
  }
  // Two sealed pages and the open third (its first copy, made so the pause has less to do).
  ASSERT_EQ(migration.stats().bytesPrecopied, 3 * size_t(m.model->config().layers) * m.model->kvLayout().pageBytes());
  // Rewind into the pre-copied pages and write different tokens over them.
  a->truncate(10);
  b->truncate(10);
  feed(*ref.model, *a, second, la);
  feed(*m.model, *b, second, lb);
  migration.commit();
  for (int i = 0; i < 5; i++) {
    const std::vector<int32_t> next{argmax(la.data(), V)};
    feed(*ref.model, *a, next, la);
    feed(*m.model, *b, next, lb);
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "step " << i;
  }
}

TEST_F(LiveMigrationFailures, SessionsThatStartOrEndDuringPrepareAreHandled) {
  LoadedModel ref = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  const auto p = prompts(m.model->config().vocabSize);
  std::vector<std::unique_ptr<runtime::Session>> sessions, refSessions;
  for (size_t i = 0; i < 2; i++) {
    sessions.push_back(m.model->createSession(256));
    refSessions.push_back(ref.model->createSession(256));
  }
  std::vector<std::vector<int32_t>> tokens{p[1], p[2]}, refTokens = tokens;
  for (int i = 0; i < 5; i++) stepAll(*m.model, sessions, tokens), stepAll(*ref.model, refSessions, refTokens);
  MigrationOptions o;
  o.units = parseUnitRange("", int(m.model->config().layers));
  o.target = m.devices[1].get();
  o.stepBytes = m.model->kvLayout().pageBytes();
  LiveMigration migration(*m.model, o);
  for (int i = 0; i < 3; i++) migration.prepareStep();
  // One session ends, another starts, mid-prepare.
  sessions.erase(sessions.begin());
  refSessions.erase(refSessions.begin());
  tokens.erase(tokens.begin());
  refTokens.erase(refTokens.begin());
  sessions.push_back(m.model->createSession(256));
  refSessions.push_back(ref.model->createSession(256));
  tokens.push_back(p[0]);
  refTokens.push_back(p[0]);
  stepAll(*m.model, sessions, tokens);
  stepAll(*ref.model, refSessions, refTokens);
  while (!migration.prepareStep()) stepAll(*m.model, sessions, tokens), stepAll(*ref.model, refSessions, refTokens);
  migration.commit();
  migration.releaseSource();
  EXPECT_EQ(migration.stats().sessions, 2);
  size_t held = 0;
  for (const auto& s : sessions) held += s->pageCount();
  EXPECT_EQ(held, pagesInUse(*m.model));
  for (int i = 0; i < 10; i++)
    EXPECT_EQ(stepAll(*m.model, sessions, tokens), stepAll(*ref.model, refSessions, refTokens));
  sessions.clear();
  EXPECT_EQ(pagesInUse(*m.model), 0u);
}

TEST_F(LiveMigrationFailures, UnitsAlreadyOnTheTargetDoNotMove) {
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  MigrationOptions o;
  o.units = parseUnitRange("", int(m.model->config().layers));
  o.target = m.devices[0].get();
  LiveMigration migration(*m.model, o);
  EXPECT_TRUE(migration.prepareStep());
  migration.commit();
  EXPECT_EQ(migration.stats().units, 0);
  EXPECT_EQ(migration.stats().weightBytes, 0u);
}

// With live sessions (every finished reply leaves one in the daemon), a migration that moves no
// block - units already on the target, or only the embedding or the head - has no KV to move: it
// commits, and the replies go on bitwise. (It once threw std::out_of_range from its session table
// and took jitllmd down.)
TEST_F(LiveMigrationFailures, AMigrationThatMovesNoBlockCommitsWhileSessionsLive) {
  LoadedModel ref = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  LoadedModel m = loadOnCpu0(sharedPath("models/stories260K.gguf"));
  const auto p = prompts(m.model->config().vocabSize);
  std::vector<std::unique_ptr<runtime::Session>> sessions, refSessions;
  for (size_t i = 0; i < 2; i++) {
    sessions.push_back(m.model->createSession(256));
    refSessions.push_back(ref.model->createSession(256));
  }
  std::vector<std::vector<int32_t>> tokens{p[0], p[1]}, refTokens = tokens;
  for (int i = 0; i < 5; i++)
    EXPECT_EQ(stepAll(*m.model, sessions, tokens), stepAll(*ref.model, refSessions, refTokens));
  const int layers = int(m.model->config().layers);
  struct Case {
    const char* units;
    Device* target;
    int moved;
  };
  for (const Case& c : {Case{"", m.devices[0].get(), 0}, Case{"output", m.devices[1].get(), 1},
                        Case{"token_embd", m.devices[1].get(), 1}, Case{"output", m.devices[1].get(), 0}}) {
    SCOPED_TRACE(std::string(c.units) + " to " + c.target->info().id.str());
    MigrationOptions o;
    o.units = parseUnitRange(c.units, layers);
    o.target = c.target;
    LiveMigration migration(*m.model, o);
    while (!migration.prepareStep()) stepAll(*m.model, sessions, tokens), stepAll(*ref.model, refSessions, refTokens);
    migration.commit();
    migration.releaseSource();
    EXPECT_TRUE(migration.committed());
    EXPECT_EQ(migration.stats().units, c.moved);
    EXPECT_EQ(migration.stats().sessions, 0);
    EXPECT_EQ(migration.stats().bytesInPause, 0u);
    for (int i = 0; i < 3; i++) {
      EXPECT_EQ(stepAll(*m.model, sessions, tokens), stepAll(*ref.model, refSessions, refTokens));
    }
  }
  EXPECT_EQ(&m.model->unitDevice(0), m.devices[1].get());
  EXPECT_EQ(&m.model->unitDevice(layers + 1), m.devices[1].get());
}

TEST(UnitRange, ParsesBlockNumbersNamesAndRanges) {
  EXPECT_EQ(parseUnitRange("", 5).first, 0);
  EXPECT_EQ(parseUnitRange("", 5).last, 6);
  EXPECT_EQ(parseUnitRange("3", 5).first, 4);
  EXPECT_EQ(parseUnitRange("blk.3", 5).last, 4);
  EXPECT_EQ(parseUnitRange("0-2", 5).first, 1);
  EXPECT_EQ(parseUnitRange("0-2", 5).last, 3);
  EXPECT_EQ(parseUnitRange("token_embd-output", 5).last, 6);
  EXPECT_EQ(parseUnitRange("embd-1", 5).first, 0);
  EXPECT_EQ(parseUnitRange("3-head", 5).last, 6);
  EXPECT_EQ(runtime::unitRangeName(parseUnitRange("2-output", 5), 5), "blk.2-output");
}

TEST(UnitRange, BadRangesAreErrorsSayingWhatIsAccepted) {
  for (const char* bad : {"5", "-1", "x", "1-", "3-1", "blk.", "1-2-3", "99999999999"}) {
    try {
      parseUnitRange(bad, 5);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFailed);
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
}

}  // namespace
}  // namespace jitllm::testing
