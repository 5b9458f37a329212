// The model runtime's guarantees: batching, placement, prefill/decode equivalence, KV paging,
// limits and errors.
#include "engine/runtime/model.h"

#include <gtest/gtest.h>

#include <chrono>

#include "base/error.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/kv/host_kv.h"
#include "tests/runtime/test_support.h"
#include "tests/scoped_test_state.h"
#include "tools/random_model.h"

namespace jitllm::testing {
namespace {

const std::string kMicro = goldenPath("micro/micro-q4_k_m.gguf");

std::vector<int32_t> microTokens() { return readIds(readFirstLine(goldenPath("micro/tokens.txt"))); }

// Logits of the last token after feeding `ids` one token at a time.
std::vector<std::vector<float>> decodeOneByOne(runtime::Model& model, const std::vector<int32_t>& ids) {
  auto session = model.createSession(int64_t(ids.size()));
  std::vector<std::vector<float>> rows;
  for (int32_t id : ids) {
    std::vector<float> logits;
    runtime::SequenceInput in{session.get(), {&id, 1}, false};
    model.forward({&in, 1}, logits);
    rows.push_back(logits);
  }
  return rows;
}

TEST(Model, PrefillAndTokenByTokenDecodeGiveBitwiseIdenticalLogits) {
  auto m = loadOnCpu(kMicro);
  const auto ids = microTokens();
  const auto all = scoreAll(*m.model, ids);
  const auto rows = decodeOneByOne(*m.model, ids);
  const size_t V = size_t(m.model->config().vocabSize);
  for (size_t p = 0; p < ids.size(); p++) {
    ASSERT_EQ(0, std::memcmp(rows[p].data(), all.data() + p * V, V * sizeof(float))) << "position " << p;
  }
}

TEST(Model, BatchedSessionsGetExactlyTheLogitsTheyGetAlone) {
  auto m = loadOnCpu(kMicro);
  const auto ids = microTokens();
  const std::vector<int32_t> a(ids.begin(), ids.begin() + 20), b(ids.begin() + 5, ids.begin() + 40),
      c(ids.begin() + 30, ids.begin() + 33);
  const auto aloneA = scoreAll(*m.model, a), aloneB = scoreAll(*m.model, b), aloneC = scoreAll(*m.model, c);

  auto sa = m.model->createSession(100), sb = m.model->createSession(100), sc = m.model->createSession(100);
  std::vector<float> logits;
  // Step 1: a and c prefill together; b gets its first 10 tokens.
  std::vector<runtime::SequenceInput> step1 = {
      {sa.get(), a, true}, {sb.get(), {b.data(), 10}, true}, {sc.get(), c, true}};
  m.model->forward(step1, logits);
  // Step 2: b continues alone with the rest.
  m.model->forward(std::vector<runtime::SequenceInput>{{sb.get(), {b.data() + 10, b.size() - 10}, true}}, logits);
  std::vector<float> expected;
  const size_t V = size_t(m.model->config().vocabSize);
  expected.insert(expected.end(), aloneA.begin(), aloneA.end());
  expected.insert(expected.end(), aloneB.begin(), aloneB.begin() + long(10 * V));
  expected.insert(expected.end(), aloneC.begin(), aloneC.end());
  expected.insert(expected.end(), aloneB.begin() + long(10 * V), aloneB.end());
  ASSERT_EQ(logits.size(), expected.size());
  EXPECT_EQ(0, std::memcmp(logits.data(), expected.data(), logits.size() * sizeof(float)));
}

TEST(Model, LongPrefillsSpanningSeveralMicrobatchesMatchShortOnes) {
  // 1200 tokens run as three microbatches; decoding the same tokens one by one must agree.
  auto m = loadOnCpu(kMicro);
  std::vector<int32_t> ids;
  for (int i = 0; i < 1200; i++) ids.push_back(int32_t((i * 7919) % 509 + 3));
  ASSERT_GT(int64_t(ids.size()), runtime::Model::kMaxStepTokens * 2);
  const auto all = scoreAll(*m.model, ids);
  auto session = m.model->createSession(int64_t(ids.size()));
  std::vector<float> logits;
  runtime::SequenceInput head{session.get(), {ids.data(), ids.size() - 1}, false};
  m.model->forward({&head, 1}, logits);
  logits.clear();
  runtime::SequenceInput last{session.get(), {&ids.back(), 1}, false};
  m.model->forward({&last, 1}, logits);
  const size_t V = size_t(m.model->config().vocabSize);
  EXPECT_EQ(0, std::memcmp(logits.data(), all.data() + (ids.size() - 1) * V, V * sizeof(float)));
}

TEST(Model, SpreadingLayersOverTwoCpuDevicesChangesNoLogit) {
  const auto ids = microTokens();
  auto one = loadOnCpu(kMicro, 1);
  // Embedding and block 0 on cpu:0, block 1 and the head on cpu:1: two boundaries per step.
  auto two = loadOnCpu(kMicro, 2, 1, {0, 0, 1, 1});
  EXPECT_EQ(&two.model->unitDevice(0), two.devices[0].get());
  EXPECT_EQ(&two.model->unitDevice(3), two.devices[1].get());
  const auto a = scoreAll(*one.model, ids), b = scoreAll(*two.model, ids);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // KV pages of block 1 came from cpu:1's pool.
  auto s = two.model->createSession(64);
  s->reserve(20);
  EXPECT_EQ(two.model->kvPool(*two.devices[1]).pagesInUse(), 2u);
}

// Each device is charged its share of a step (the utilisation the scheduler reports), and only
// the devices that ran something are.
TEST(Model, EachDeviceIsChargedTheTimeTheStepSpentOnIt) {
  const auto ids = microTokens();
  auto two = loadOnCpu(kMicro, 3, 1, {0, 0, 1, 1});
  const uint64_t before0 = two.devices[0]->busyNanoseconds(), before1 = two.devices[1]->busyNanoseconds();
  const auto start = std::chrono::steady_clock::now();
  scoreAll(*two.model, ids);
  const uint64_t wall =
      uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  const uint64_t busy0 = two.devices[0]->busyNanoseconds() - before0;
  const uint64_t busy1 = two.devices[1]->busyNanoseconds() - before1;
  EXPECT_GT(busy0, 0u);
  EXPECT_GT(busy1, 0u);
  EXPECT_LE(busy0 + busy1, wall) << "the shares cannot add up to more than the step took";
  EXPECT_EQ(two.devices[2]->busyNanoseconds(), 0u) << "cpu:2 ran nothing";
}

// Blocks streamed through device memory (a model larger than its device) compute from the same
// bytes: every logit is the resident model's, for a prefill spanning microbatches and for decode.
TEST(Model, StreamingBlocksThroughDeviceMemoryChangesNoLogit) {
  const auto ids = microTokens();
  auto resident = loadOnCpu(kMicro);
  LoadedModel streamed;
  cpu::CpuDeviceOptions o;
  o.threads = 2;
  streamed.devices.push_back(std::make_unique<cpu::CpuDevice>(o));
  runtime::ModelLoadOptions options;
  options.devices = {streamed.devices[0].get()};
  options.streamed = {false, true, true, false};
  streamed.model = runtime::Model::load(kMicro, options);
  ASSERT_EQ(streamed.model->unitCount(), 4);
  EXPECT_TRUE(streamed.model->unitInfo(1).streamed);
  EXPECT_TRUE(streamed.model->unitInfo(2).streamed);
  EXPECT_FALSE(streamed.model->unitInfo(3).streamed);
  EXPECT_EQ(streamed.model->unitInfo(1).weightBytes, resident.model->unitInfo(1).weightBytes);
  const auto a = scoreAll(*resident.model, ids), b = scoreAll(*streamed.model, ids);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  const auto ra = decodeOneByOne(*resident.model, ids), rb = decodeOneByOne(*streamed.model, ids);
  for (size_t p = 0; p < ids.size(); p++) {
    ASSERT_EQ(0, std::memcmp(ra[p].data(), rb[p].data(), ra[p].size() * sizeof(float))) << "position " << p;
  }
  // Only blocks stream.
  options.streamed = {true, false, false, false};
  EXPECT_THROW(runtime::Model::load(kMicro, options), Error);
}

TEST(Model, TheThreadCountDoesNotChangeAnyLogit) {
  const auto ids = microTokens();
  auto one = loadOnCpu(kMicro, 1, 1), two = loadOnCpu(kMicro, 1, 2);
  const auto a = scoreAll(*one.model, ids), b = scoreAll(*two.model, ids);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// The CPU's prompt path (Device::setPromptRows; CpuDevice: byte activations, matmulPromptRows):
// a prompt fed on it leaves the same KV whatever its chunks, so the logits after it - its last
// token on the decode path - have the same bits fed whole, in chunks, or with the last token in the
// same input; the path is taken (those bits are not decode's), and a device told not to take it
// (CpuDeviceOptions::promptBytes, JITLLM_CPU_PROMPT_BYTES=0) gives decode's bits for every token.
TEST(Model, APromptOnTheCpuPromptPathGivesTheSameBitsHoweverItIsChunked) {
  const auto ids = microTokens();
  const size_t prompt = ids.size() - 1;
  const auto lastLogits = [&](runtime::Model& model, const std::vector<size_t>& chunks, bool promptPath) {
    auto session = model.createSession(int64_t(ids.size()));
    std::vector<float> logits;
    size_t at = 0;
    for (size_t n : chunks) {
      runtime::SequenceInput in{session.get(), {ids.data() + at, n}, false, promptPath ? int64_t(n) : 0};
      model.forward({&in, 1}, logits);
      at += n;
    }
    runtime::SequenceInput in{
        session.get(), {ids.data() + at, ids.size() - at}, false, promptPath ? int64_t(ids.size() - at - 1) : 0};
    logits.clear();
    model.forward({&in, 1}, logits);
    return logits;
  };
  for (cpu::Isa isa : cpu::kAllIsas) {
    if (!cpu::promptRowsOnBytes(isa, quant::TensorType::kQ4_K)) continue;
    SCOPED_TRACE(cpu::isaName(isa));
    cpu::CpuDeviceOptions o;
    o.isa = isa;
    o.threads = 2;
    cpu::CpuDevice device(o);
    o.promptBytes = false;
    cpu::CpuDevice decodeOnly(o);
    ASSERT_TRUE(device.promptBytes());
    runtime::ModelLoadOptions options;
    options.devices = {&device};
    auto model = runtime::Model::load(kMicro, options);
    options.devices = {&decodeOnly};
    auto reference = runtime::Model::load(kMicro, options);

    const auto whole = lastLogits(*model, {prompt}, true);
    EXPECT_EQ(whole, lastLogits(*model, {7, 13, 19}, true));
    EXPECT_EQ(whole, lastLogits(*model, {}, true));  // the prompt and its last token in one input
    const auto decode = lastLogits(*model, {prompt}, false);
    EXPECT_NE(whole, decode) << "the prompt rows took decode's path";
    EXPECT_EQ(lastLogits(*reference, {prompt}, true), decode);
    const double e = compareLogits(whole, decode, 512).nmse;
    std::printf("micro q4_k_m on %s: prompt path vs decode path nmse %.3e\n", cpu::isaName(isa), e);
    EXPECT_LE(e, 1e-3);
    // Device::setPromptRows' contract is checked: ranges sorted, disjoint, non-empty, within tokens.
    const Device::RowRange empty[] = {{3, 3}}, past[] = {{2, 9}}, unsorted[] = {{4, 6}, {1, 2}};
    EXPECT_THROW(device.setPromptRows(empty, 8), Error);
    EXPECT_THROW(device.setPromptRows(past, 8), Error);
    EXPECT_THROW(device.setPromptRows(unsorted, 8), Error);
  }
}

// The float variants differ from the portable one by float rounding alone; the integer ones
// (quantized weights against ~15-bit activations, kernels/cpu/gemm/matmul_int8.inc) also by the
// activations' rounding. Integer variants of one width share every kernel's bits (the products
// are one contract everywhere; attention and activations follow the vector width).
// Every type of the contract runs: q4_K and q6_K (Q4_K_M), q5_K (Q5_K_M), q4_0 and q8_0.
class EveryKernelVariant : public ::testing::TestWithParam<const char*> {};

TEST_P(EveryKernelVariant, AgreesWithThePortableOneToRounding) {
  const std::string path = goldenPath(std::string("micro/micro-") + GetParam() + ".gguf");
  const auto ids = microTokens();
  std::vector<float> portable, integer256, integer512;
  for (cpu::Isa isa : cpu::kAllIsas) {
    if (!cpu::isaSupported(isa)) continue;
    SCOPED_TRACE(cpu::isaName(isa));
    cpu::CpuDeviceOptions o;
    o.isa = isa;
    o.threads = 2;
    cpu::CpuDevice device(o);
    runtime::ModelLoadOptions options;
    options.devices = {&device};
    auto model = runtime::Model::load(path, options);
    const std::vector<float> logits = scoreAll(*model, ids);
    if (isa == cpu::Isa::kScalar) {
      portable = logits;
      continue;
    }
    const bool integerKernels = isa != cpu::Isa::kAvx512;
    const auto r = compareLogits(logits, portable, 512);
    EXPECT_LT(r.nmse, integerKernels ? 1e-7 : 1e-10);
    EXPECT_EQ(r.top1, 1.0);
    if (integerKernels) {
      std::vector<float>& same = isa > cpu::Isa::kAvx512 ? integer512 : integer256;
      if (same.empty()) same = logits;
      EXPECT_EQ(0, std::memcmp(same.data(), logits.data(), logits.size() * sizeof(float)))
          << "integer variants of one width must give one another's bits";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Model, EveryKernelVariant, ::testing::Values("q4_k_m", "q5_k_m", "q4_0", "q8_0"));

TEST(Model, AnFp16KvCacheStaysCloseToFp32AndKeepsPrefillEqualToDecode) {
  const auto ids = microTokens();
  auto f32 = loadOnCpu(kMicro);
  cpu::CpuDevice device;
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  options.kvPrecision = KvPrecision::kF16;
  auto f16 = runtime::Model::load(kMicro, options);
  EXPECT_EQ(f16->kvLayout().pageBytes() * 2, f32.model->kvLayout().pageBytes());
  const auto a = scoreAll(*f16, ids), b = scoreAll(*f32.model, ids);
  const auto r = compareLogits(a, b, 512);
  EXPECT_GT(r.nmse, 0.0) << "fp16 storage must round something";
  EXPECT_LT(r.nmse, 1e-6);
  const auto rows = decodeOneByOne(*f16, ids);
  EXPECT_EQ(0, std::memcmp(rows.back().data(), a.data() + (ids.size() - 1) * 512, 512 * sizeof(float)));
}

TEST(Model, SessionsReturnTheirKvPagesWhenTheyEnd) {
  auto m = loadOnCpu(kMicro);
  auto& pool = m.model->kvPool(*m.devices[0]);
  EXPECT_EQ(pool.pagesInUse(), 0u);
  {
    auto s1 = m.model->createSession(200), s2 = m.model->createSession(200);
    std::vector<float> logits;
    const auto ids = microTokens();
    runtime::SequenceInput in{s1.get(), ids, false};
    m.model->forward({&in, 1}, logits);
    // 64 tokens in 16-token pages, for each of the 2 layers.
    EXPECT_EQ(s1->pageCount(), 8u);
    EXPECT_EQ(pool.pagesInUse(), 8u);
    s2->reserve(17);
    EXPECT_EQ(pool.pagesInUse(), 12u);
  }
  EXPECT_EQ(pool.pagesInUse(), 0u);
  EXPECT_EQ(pool.pagesReserved(), 0u) << "empty chunks go back to the device";
  EXPECT_EQ(m.devices[0]->memoryUsed() > 0, true);  // activations stay
  auto s3 = m.model->createSession(200);
  s3->reserve(64);
  auto s4 = m.model->createSession(200);
  s4->reserve(16);
  EXPECT_EQ(pool.pagesReserved(), runtime::KvPagePool::kPagesPerChunk) << "one chunk serves both";
  s3.reset();
  EXPECT_EQ(pool.pagesInUse(), 2u);
  EXPECT_EQ(pool.pagesReserved(), runtime::KvPagePool::kPagesPerChunk) << "a chunk with a used page stays";
}

TEST(Model, PassingTheContextLimitIsAClearErrorThatChangesNothing) {
  auto m = loadOnCpu(kMicro);
  auto s = m.model->createSession(10);
  const auto ids = microTokens();
  std::vector<float> logits;
  runtime::SequenceInput in{s.get(), {ids.data(), 8}, false};
  m.model->forward({&in, 1}, logits);
  EXPECT_EQ(s->length(), 8);
  runtime::SequenceInput tooMany{s.get(), {ids.data(), 3}, false};
  try {
    m.model->forward({&tooMany, 1}, logits);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_NE(std::string(e.what()).find("context limit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->length(), 8);
  runtime::SequenceInput fits{s.get(), {ids.data(), 2}, false};
  EXPECT_NO_THROW(m.model->forward({&fits, 1}, logits));
}

TEST(Model, BadBatchesAreRefusedBeforeAnySessionAdvances) {
  auto m = loadOnCpu(kMicro);
  auto s = m.model->createSession(100);
  std::vector<float> logits;
  const std::vector<int32_t> good = {1, 2, 3}, bad = {1, 512};
  auto s2 = m.model->createSession(100);
  std::vector<runtime::SequenceInput> batch = {{s.get(), good, false}, {s2.get(), bad, false}};
  EXPECT_THROW(m.model->forward(batch, logits), Error);
  std::vector<runtime::SequenceInput> twice = {{s.get(), good, false}, {s.get(), good, false}};
  EXPECT_THROW(m.model->forward(twice, logits), Error);
  std::vector<runtime::SequenceInput> empty = {{s.get(), {}, false}};
  EXPECT_THROW(m.model->forward(empty, logits), Error);
  EXPECT_EQ(s->length(), 0);
  EXPECT_EQ(s2->length(), 0);
  EXPECT_TRUE(logits.empty());
}

TEST(Model, ADeviceOutOfMemoryIsOverloadedNotACrash) {
  cpu::CpuDeviceOptions o;
  o.memoryBudget = 300 * 1024;  // activations fit, a long context's KV does not
  o.threads = 1;
  cpu::CpuDevice device(o);
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  auto model = runtime::Model::load(kMicro, options);
  auto s = model->createSession(2048);
  std::vector<float> logits;
  std::vector<int32_t> ids(1500, 5);
  runtime::SequenceInput in{s.get(), ids, false};
  try {
    model->forward({&in, 1}, logits);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOverloaded) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu:0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->length(), 0);
}

// Copies a GGUF file's metadata and tensors into a writer, leaving out one tensor and
// overriding keys, to build broken variants of a good model.
std::vector<uint8_t> rewrite(const std::string& path, const std::string& dropTensor,
                             const std::vector<std::pair<std::string, gguf::Value>>& overrides) {
  auto f = gguf::GgufFile::open(path);
  gguf::GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const auto& [k, v] : overrides) w.set(k, v);
  for (const auto& t : f->tensors()) {
    if (t.name != dropTensor) w.addTensor(t.name, t.type, t.dims, {t.data, t.nbytes});
  }
  return w.serialize();
}

void expectLoadError(const std::vector<uint8_t>& bytes, const std::string& what) {
  cpu::CpuDevice device;
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  try {
    runtime::Model::fromFile(gguf::GgufFile::fromBytes(bytes, "broken.gguf"), options);
    ADD_FAILURE() << "loaded a model that should fail with: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("broken.gguf"), std::string::npos) << e.what();
  }
}

TEST(Model, AMissingTensorIsAnErrorNamingIt) {
  expectLoadError(rewrite(kMicro, "blk.1.ffn_up.weight", {}), "missing tensor 'blk.1.ffn_up.weight'");
  expectLoadError(rewrite(kMicro, "output_norm.weight", {}), "missing tensor 'output_norm.weight'");
}

TEST(Model, AnUnknownArchitectureIsAnErrorNamingIt) {
  expectLoadError(rewrite(kMicro, "", {{"general.architecture", gguf::Value::string("mamba")}}),
                  "unsupported architecture 'mamba'");
}

TEST(Model, InconsistentHyperparametersAreErrorsNamingTheKey) {
  expectLoadError(rewrite(kMicro, "", {{"llama.attention.head_count", gguf::Value::u32(3)}}), "head_count");
  expectLoadError(rewrite(kMicro, "", {{"llama.block_count", gguf::Value::u32(3)}}), "missing tensor 'blk.2.");
  expectLoadError(rewrite(kMicro, "", {{"llama.embedding_length", gguf::Value::u32(0)}}), "embedding_length");
}

// The micro model relabelled as `arch` (its keys under "ARCH.") with the keys the architecture
// needs - qwen3 64-wide heads as attention.key_length (and per-head q/k norm vectors), granite
// Granite 3.3's multipliers - less `dropKey` of those, then `overrides`, less one tensor.
std::vector<uint8_t> relabelledMicro(const std::string& arch, const std::string& dropTensor,
                                     const std::vector<std::pair<std::string, gguf::Value>>& overrides,
                                     const std::string& dropKey = "") {
  auto f = gguf::GgufFile::open(kMicro);
  gguf::GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.set(k.rfind("llama.", 0) == 0 ? arch + "." + k.substr(6) : k, v);
  w.set("general.architecture", gguf::Value::string(arch));
  std::vector<std::pair<std::string, gguf::Value>> needed;
  if (arch == "qwen3") {
    needed = {{"qwen3.attention.key_length", gguf::Value::u32(64)},
              {"qwen3.attention.value_length", gguf::Value::u32(64)}};
  } else if (arch == "granite") {
    needed = {{"granite.logit_scale", gguf::Value::f32(8.0f)},
              {"granite.embedding_scale", gguf::Value::f32(12.0f)},
              {"granite.residual_scale", gguf::Value::f32(0.22f)},
              {"granite.attention.scale", gguf::Value::f32(0.015625f)}};
  }
  for (const auto& [k, v] : needed) {
    if (k != dropKey) w.set(k, v);
  }
  for (const auto& [k, v] : overrides) w.set(k, v);
  const std::vector<float> ones(64, 1.0f);
  const std::span<const uint8_t> norm(reinterpret_cast<const uint8_t*>(ones.data()), ones.size() * sizeof(float));
  for (const auto& t : f->tensors()) {
    if (t.name != dropTensor) w.addTensor(t.name, t.type, t.dims, {t.data, t.nbytes});
  }
  for (int b = 0; b < 2 && arch == "qwen3"; b++) {
    for (const char* which : {"attn_q_norm", "attn_k_norm"}) {
      const std::string name = "blk." + std::to_string(b) + "." + which + ".weight";
      if (name != dropTensor) w.addTensor(name, quant::TensorType::kF32, {64}, norm);
    }
  }
  return w.serialize();
}

TEST(Model, Qwen3LoadsAndItsKeysAndNormsAreCheckedByName) {
  {
    cpu::CpuDevice device;
    runtime::ModelLoadOptions options;
    options.devices = {&device};
    auto m =
        runtime::Model::fromFile(gguf::GgufFile::fromBytes(relabelledMicro("qwen3", "", {}), "qwen3.gguf"), options);
    EXPECT_EQ(m->config().arch, runtime::Architecture::kQwen3);
    EXPECT_TRUE(m->config().qkNorm);
    EXPECT_TRUE(m->config().ropeNeox);
    EXPECT_EQ(m->config().headDim, 64);
  }
  expectLoadError(relabelledMicro("qwen3", "blk.1.attn_k_norm.weight", {}),
                  "missing tensor 'blk.1.attn_k_norm.weight'");
  expectLoadError(relabelledMicro("qwen3", "", {{"qwen3.attention.key_length", gguf::Value::u32(63)}}),
                  "attention.key_length' is 63, which is odd");
  expectLoadError(relabelledMicro("qwen3", "", {{"qwen3.attention.value_length", gguf::Value::u32(32)}}),
                  "attention.value_length' is 32");
  // Heads of their own width: the q matrix must then be heads x key_length rows.
  expectLoadError(relabelledMicro("qwen3", "",
                                  {{"qwen3.attention.key_length", gguf::Value::u32(128)},
                                   {"qwen3.attention.value_length", gguf::Value::u32(128)}}),
                  "tensor 'blk.0.attn_q.weight' has shape");
}

TEST(Model, GraniteReadsItsMultipliersAndRefusesBadOnesByName) {
  {
    cpu::CpuDevice device;
    runtime::ModelLoadOptions options;
    options.devices = {&device};
    auto m = runtime::Model::fromFile(gguf::GgufFile::fromBytes(relabelledMicro("granite", "", {}), "g.gguf"), options);
    EXPECT_EQ(m->config().arch, runtime::Architecture::kGranite);
    EXPECT_FLOAT_EQ(m->config().logitScale, 8.0f);
    EXPECT_FLOAT_EQ(m->config().embeddingScale, 12.0f);
    EXPECT_FLOAT_EQ(m->config().residualScale, 0.22f);
    EXPECT_FLOAT_EQ(m->config().attentionScale, 0.015625f);
    EXPECT_FALSE(m->config().ropeNeox);
  }
  // logit_scale is required (llama.cpp requires it too); the others are optional.
  expectLoadError(relabelledMicro("granite", "", {}, "granite.logit_scale"),
                  "missing metadata key 'granite.logit_scale'");
  expectLoadError(relabelledMicro("granite", "", {{"granite.residual_scale", gguf::Value::f32(-1.0f)}}),
                  "'granite.residual_scale' is -1, not a positive finite multiplier");
  expectLoadError(relabelledMicro("granite", "", {{"granite.rope.scaling.finetuned", gguf::Value::boolean(false)}}),
                  "rope.scaling.finetuned' is false");
}

// Phi-3 from our generator: fused matrices split into their products, LongRoPE's factors picked by
// the context, its attention factor read; a bad factor is an error naming the key.
TEST(Model, Phi3SplitsItsFusedMatricesAndPicksItsRopeFactorsByContext) {
  const TempDir dir;
  const std::string path = dir.path() + "/phi3.gguf";
  tools::writeRandomModel({*tools::findShape("phi3-micro"), *tools::findMix("f32"), 3, JITLLM_SHARED_DIR}, path);
  auto load = [&](const std::vector<std::pair<std::string, gguf::Value>>& overrides) {
    return rewrite(path, "", overrides);
  };
  cpu::CpuDevice device;
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  {
    auto m = runtime::Model::fromFile(gguf::GgufFile::fromBytes(load({}), "phi3.gguf"), options);
    EXPECT_EQ(m->config().arch, runtime::Architecture::kPhi3);
    EXPECT_TRUE(m->config().longRopeFactors()) << "8192 tokens of context past the original 4096";
    EXPECT_NEAR(m->config().ropeAttnFactor, 1.1902381f, 1e-6);
    // The same model scores the same logits whichever way its fused rows are bound (a step runs).
    const auto logits = scoreAll(*m, {1, 2, 3});
    EXPECT_EQ(logits.size(), 3u * 32064u);
  }
  {
    auto m = runtime::Model::fromFile(
        gguf::GgufFile::fromBytes(load({{"phi3.context_length", gguf::Value::u32(4096)}}), "phi3.gguf"), options);
    EXPECT_FALSE(m->config().longRopeFactors()) << "within the original context: the short factors";
  }
  {
    // Loaded for sessions of at most 4096 tokens (the daemon's default): the short factors too,
    // as llama.cpp at -c 4096 - and other logits than the long ones give.
    runtime::ModelLoadOptions shortContext = options;
    shortContext.contextSize = 4096;
    auto shortModel = runtime::Model::fromFile(gguf::GgufFile::fromBytes(load({}), "phi3.gguf"), shortContext);
    EXPECT_FALSE(shortModel->config().longRopeFactors());
    auto longModel = runtime::Model::fromFile(gguf::GgufFile::fromBytes(load({}), "phi3.gguf"), options);
    EXPECT_NE(scoreAll(*shortModel, {1, 2, 3, 4}), scoreAll(*longModel, {1, 2, 3, 4}));
  }
  expectLoadError(load({{"phi3.rope.scaling.attn_factor", gguf::Value::f32(0.0f)}}),
                  "'phi3.rope.scaling.attn_factor' is 0, not a positive finite multiplier");
  expectLoadError(load({{"phi3.rope.scaling.type", gguf::Value::string("yarn")}}), "rope scaling type 'yarn'");
}

// Gemma 3 from our generator: which layers slide (the period, or one flag per layer), their rope
// base, the multipliers; bad keys and missing post norms are errors naming them; a soft-cap caps.
TEST(Model, Gemma3ReadsItsSlidingLayersAndRefusesBadKeysByName) {
  const TempDir dir;
  const std::string path = dir.path() + "/gemma3.gguf";
  tools::writeRandomModel({*tools::findShape("gemma3-micro"), *tools::findMix("f32"), 3, JITLLM_SHARED_DIR}, path);
  auto load = [&](const std::vector<std::pair<std::string, gguf::Value>>& overrides, const std::string& drop = "") {
    return rewrite(path, drop, overrides);
  };
  cpu::CpuDevice device;
  runtime::ModelLoadOptions options;
  options.devices = {&device};
  auto open = [&](const std::vector<uint8_t>& bytes) {
    return runtime::Model::fromFile(gguf::GgufFile::fromBytes(bytes, "gemma3.gguf"), options);
  };
  {
    auto m = open(load({}));
    const runtime::ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, runtime::Architecture::kGemma3);
    EXPECT_TRUE(c.geluFfn && c.postNorms && c.qkNorm && c.ropeNeox);
    EXPECT_FLOAT_EQ(c.embeddingScale, 16.0f);          // sqrt(256)
    EXPECT_FLOAT_EQ(c.attentionScale, 1.0f / 8.0f);    // 1 / sqrt(64)
    EXPECT_FLOAT_EQ(c.ropeFreqBaseSliding, 10000.0f);  // rope.freq_base_swa
    EXPECT_EQ(c.slidingWindow, 24);
    // Period 6 (llama.cpp's default): layer 5 is the global one.
    for (int l = 0; l < 6; l++) EXPECT_EQ(c.slidingLayer(l), l != 5) << "layer " << l;
    EXPECT_EQ(c.logitSoftcap, 0.0f);
  }
  {
    auto m = open(load({{"gemma3.attention.sliding_window_pattern", gguf::Value::u32(2)}}));
    for (int l = 0; l < 6; l++) EXPECT_EQ(m->config().slidingLayer(l), l % 2 == 0) << "layer " << l;
  }
  {
    std::vector<gguf::Value> flags;
    for (int l = 0; l < 6; l++) flags.push_back(gguf::Value::boolean(l < 3));
    auto m =
        open(load({{"gemma3.attention.sliding_window_pattern", gguf::Value::array(gguf::ValueType::kBool, flags)}}));
    for (int l = 0; l < 6; l++) EXPECT_EQ(m->config().slidingLayer(l), l < 3) << "layer " << l;
  }
  {
    // No window: every layer global, every page kept.
    auto m = open(load({{"gemma3.attention.sliding_window", gguf::Value::u32(0)}}));
    EXPECT_FALSE(m->config().slidingLayer(0));
  }
  {
    // A soft-cap bounds every logit by the cap.
    auto m = open(load({{"gemma3.final_logit_softcapping", gguf::Value::f32(0.5f)}}));
    for (float v : scoreAll(*m, {1, 2, 3})) ASSERT_LE(std::fabs(v), 0.5f);
  }
  std::vector<gguf::Value> fewFlags(5, gguf::Value::boolean(true));
  expectLoadError(
      load({{"gemma3.attention.sliding_window_pattern", gguf::Value::array(gguf::ValueType::kBool, fewFlags)}}),
      "'gemma3.attention.sliding_window_pattern' is an array of 5 elements, not one bool per layer (6)");
  expectLoadError(load({{"gemma3.attention.sliding_window", gguf::Value::i32(-4)}}),
                  "'gemma3.attention.sliding_window' is -4");
  expectLoadError(load({{"gemma3.rope.freq_base_swa", gguf::Value::f32(-1.0f)}}), "rope.freq_base_swa' is -1");
  expectLoadError(load({{"gemma3.final_logit_softcapping", gguf::Value::f32(-3.0f)}}),
                  "'gemma3.final_logit_softcapping' is -3, not a positive finite multiplier");
  expectLoadError(load({}, "blk.2.post_ffw_norm.weight"), "missing tensor 'blk.2.post_ffw_norm.weight'");
  expectLoadError(load({}, "blk.0.post_attention_norm.weight"), "missing tensor 'blk.0.post_attention_norm.weight'");
}

// A sliding layer's pages go back to the pool as its window passes them - with a window of one
// token, every page of a table can be behind it - while a global layer keeps all of its; rewinds
// behind freed pages are refused and parking takes live pages only.
TEST(Session, SlidingLayersFreeThePagesTheirWindowHasLeft) {
  cpu::CpuDevice device;
  runtime::KvPagePool pool(device, KvLayout{16, 1, 2, KvPrecision::kF32});
  runtime::Session s(1, 100, {&pool, &pool, &pool}, nullptr, {1, 24, 0});
  s.reserve(32);
  s.advance(32);
  // Window 1: the next token (position 32) needs no page so far; window 24: positions 9..32.
  EXPECT_EQ(s.layerPageCount(0), 0u);
  EXPECT_EQ(s.layerPageTableSize(0), 2u);
  EXPECT_EQ(s.pageAddresses(0)[0], nullptr);
  EXPECT_EQ(s.pageAddresses(0)[1], nullptr);
  EXPECT_EQ(s.firstLivePage(1), 0u);
  EXPECT_EQ(s.layerPageCount(2), 2u);
  EXPECT_EQ(pool.pagesInUse(), 4u);
  s.reserve(8);
  s.advance(8);  // 40 tokens: window 24 needs positions 17..40, from page 1 on
  EXPECT_EQ(s.firstLivePage(1), 1u);
  EXPECT_EQ(s.layerPageCount(0), 1u);
  EXPECT_EQ(s.layerPageCount(1), 2u);
  EXPECT_EQ(s.layerPageCount(2), 3u);
  EXPECT_EQ(s.pageCount(), 6u);
  EXPECT_EQ(pool.pagesInUse(), 6u);
  // Back to 39: the next token's windows need page 2 (window 1) and positions 16.. (window 24,
  // page 1 on): all live. Back to 31 or 16: window 1 needs page 1, which layer 0 has freed.
  EXPECT_TRUE(s.canTruncate(39));
  EXPECT_FALSE(s.canTruncate(31));
  EXPECT_FALSE(s.canTruncate(16));
  EXPECT_THROW(s.truncate(16), Error);
  EXPECT_EQ(s.length(), 40);
  const runtime::HostKv parked(s);
  EXPECT_EQ(parked.bytes(), 6 * pool.layout().pageBytes());
  EXPECT_TRUE(parked.canTruncate(40));
  EXPECT_FALSE(parked.canTruncate(16));
}

}  // namespace
}  // namespace jitllm::testing
