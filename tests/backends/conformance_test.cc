// The conformance suite every backend passes: each op against the CPU reference (and the float64
// truth where a sum is involved) on fresh random inputs, with the seed printed; prefill giving
// decode's bits; the integer products within their contract; and the memory contract - budgets,
// copies, block gathers - that the engine's paging and migration rest on.
//
// Instantiated once per backend of this build (from builtinBackends(): a new backend is tested by
// registering it, nothing more) and, for the memory subset, for the toy "null" backend a test
// registers itself. A backend with no device on this machine skips, saying why.
#include <gtest/gtest.h>

#include <cfloat>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "base/error.h"
#include "engine/devices/builtin_backends.h"
#include "tests/backends/null_backend.h"
#include "tests/backends/op_inputs.h"

namespace jitllm::testing {
namespace {

using quant::TensorType;

// The backend a test runs on: the registry it opens devices through, and its name.
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    registry_ = runtime::builtinBackends();
    // Registering it is all a backend needs to be opened, enumerated and tested.
    if (GetParam() == "null") registry_.add(makeNullBackend());
    Backend* backend = registry_.find(GetParam());
    ASSERT_NE(backend, nullptr) << GetParam();
    std::string why;
    if (backend->enumerate(&why).devices.empty()) GTEST_SKIP() << "no " << GetParam() << " device here: " << why;
    device_ = open();
    reference_ = makeCpuDevice();
  }
  // Device 0 of the backend, capped at `cap` bytes (0: what it has).
  std::unique_ptr<Device> open(size_t cap = 0) { return registry_.open(DeviceRequest{{GetParam(), 0}, cap}, 2); }

  Device& dev() { return *device_; }
  Device& cpu() { return *reference_; }

  runtime::BackendRegistry registry_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<cpu::CpuDevice> reference_;
};

std::string testName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

std::vector<std::string> builtinNames() { return runtime::builtinBackends().names(); }

std::vector<std::string> builtinNamesAndNull() {
  std::vector<std::string> names = builtinNames();
  names.push_back("null");
  return names;
}

// ---- memory: every backend, the toy one included ----

class MemoryConformance : public BackendTest {};

TEST_P(MemoryConformance, CopiesRoundTripAtAnyOffsetAndSize) {
  for (size_t bytes : {size_t(1), size_t(4099), size_t(3) << 20, size_t(70) << 20}) {
    SCOPED_TRACE(bytes);
    std::vector<uint8_t> host(bytes);
    std::mt19937 rng(freshSeed());
    for (auto& b : host) b = uint8_t(rng());
    auto buffer = dev().allocate(bytes + 100);
    dev().copyFromHost(buffer->data() + 37, host.data(), bytes);
    std::vector<uint8_t> back(bytes);
    dev().copyToHost(back.data(), buffer->data() + 37, bytes);
    ASSERT_EQ(back, host);
  }
}

TEST_P(MemoryConformance, AllocationPastTheBudgetIsOverloadedAndFreedMemoryIsReusable) {
  auto small = open(size_t(1) << 20);
  EXPECT_EQ(small->info().memoryBudget, size_t(1) << 20);
  auto a = small->allocate(600 << 10);
  EXPECT_GE(small->memoryUsed(), size_t(600) << 10);
  try {
    small->allocate(600 << 10);
    FAIL() << "expected OVERLOADED";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOverloaded);
    EXPECT_NE(std::string(e.what()).find(small->info().id.str() + ": out of memory"), std::string::npos) << e.what();
  }
  a.reset();
  EXPECT_EQ(small->memoryUsed(), 0u);
  auto b = small->allocate(600 << 10);  // freed memory is reusable
  EXPECT_GE(small->memoryUsed(), size_t(600) << 10);
}

// A migration's KV pages: scattered blocks gathered into host memory as one transfer and scattered
// back, in 16-byte moves (aligned blocks) and bytewise (an odd size), more bytes than a GPU's
// pinned staging buffers hold.
TEST_P(MemoryConformance, GatherAndScatterMoveScatteredBlocks) {
  for (size_t blockBytes : {size_t(1) << 20, size_t(4099)}) {
    SCOPED_TRACE(blockBytes);
    constexpr size_t kPool = 24, kCount = 20;
    auto pool = dev().allocate(kPool * blockBytes);
    std::vector<uint8_t> host(kPool * blockBytes);
    std::mt19937 rng(freshSeed() + uint32_t(blockBytes));
    for (auto& b : host) b = uint8_t(rng());
    dev().copyFromHost(pool->data(), host.data(), host.size());
    std::vector<size_t> order(kPool);
    std::iota(order.begin(), order.end(), size_t(0));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<const uint8_t*> from;
    for (size_t i = 0; i < kCount; i++) from.push_back(pool->data() + order[i] * blockBytes);
    std::vector<uint8_t> gathered(kCount * blockBytes);
    dev().gatherToHost(gathered.data(), from.data(), kCount, blockBytes);
    for (size_t i = 0; i < kCount; i++) {
      ASSERT_EQ(0, std::memcmp(gathered.data() + i * blockBytes, host.data() + order[i] * blockBytes, blockBytes))
          << "block " << i;
    }
    std::vector<uint8_t> fresh(kCount * blockBytes);
    for (auto& b : fresh) b = uint8_t(rng());
    std::vector<uint8_t*> to;
    std::vector<uint8_t> want = host;
    for (size_t i = 0; i < kCount; i++) {
      to.push_back(pool->data() + order[kCount - 1 - i] * blockBytes);
      std::memcpy(want.data() + order[kCount - 1 - i] * blockBytes, fresh.data() + i * blockBytes, blockBytes);
    }
    dev().scatterFromHost(to.data(), fresh.data(), kCount, blockBytes);
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(dev(), *pool, want.size()).data(), want.data(), want.size()));
    if (!dev().info().caps.hostMemory) {
      // A block that is not this device's is refused before anything moves.
      const std::vector<const uint8_t*> foreign = {from[0], host.data()};
      EXPECT_THROW(dev().gatherToHost(gathered.data(), foreign.data(), 2, blockBytes), Error);
      std::vector<uint8_t*> foreignTo = {to[0], host.data()};
      EXPECT_THROW(dev().scatterFromHost(foreignTo.data(), fresh.data(), 2, blockBytes), Error);
      EXPECT_EQ(0, std::memcmp(download<uint8_t>(dev(), *pool, want.size()).data(), want.data(), want.size()));
    }
  }
}

// Bytes between this device and another backend's (the CPU), both ways: how weights and KV pages
// reach a device of another kind.
TEST_P(MemoryConformance, CopyToDeviceMovesBytesToAndFromAnotherBackendsDevice) {
  const size_t bytes = (size_t(9) << 20) + 13;  // more than one staging chunk, an odd tail
  std::vector<uint8_t> host(bytes);
  std::mt19937 rng(freshSeed() + 3);
  for (auto& b : host) b = uint8_t(rng());
  auto here = dev().allocate(bytes);
  auto there = cpu().allocate(bytes);
  dev().copyFromHost(here->data(), host.data(), bytes);
  dev().copyToDevice(cpu(), there->data(), here->data(), bytes);
  ASSERT_EQ(0, std::memcmp(there->data(), host.data(), bytes));
  std::reverse(host.begin(), host.end());
  std::memcpy(there->data(), host.data(), bytes);
  cpu().copyToDevice(dev(), here->data(), there->data(), bytes);
  EXPECT_EQ(download<uint8_t>(dev(), *here, bytes), host);
}

INSTANTIATE_TEST_SUITE_P(Backends, MemoryConformance, ::testing::ValuesIn(builtinNamesAndNull()), testName);

// A backend is one registration: the null backend is opened by name through the registry, listed
// by it, refused twice, and its devices are ordinary devices to the engine.
TEST(BackendRegistry, AFourthBackendIsOneRegistration) {
  runtime::BackendRegistry registry = runtime::builtinBackends();
  registry.add(makeNullBackend());
  EXPECT_EQ(registry.names().back(), "null");
  auto devices = registry.open("cpu:0,null:0@64M,null:1", 1);
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[1]->info().id, (DeviceId{"null", 0}));
  EXPECT_EQ(devices[1]->info().memoryBudget, size_t(64) << 20);
  EXPECT_EQ(devices[2]->info().id.str(), "null:1");
  EXPECT_THROW(registry.add(makeNullBackend()), Error);
  try {
    runtime::builtinBackends().open("null:0", 1);
    FAIL() << "the built-in registry has no null backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'null'"), std::string::npos) << e.what();
  }
}

// ---- ops: every built-in backend ----

class OpConformance : public BackendTest {};

TEST_P(OpConformance, GetRowsDecodesEveryWeightTypeBitIdenticallyToTheReference) {
  for (TensorType type : kWeightTypes) {
    SCOPED_TRACE(quant::typeName(type));
    const Matrix m = randomMatrix(type, 11, colsFor(type), freshSeed() + uint32_t(type));
    auto table = dev().adoptHostBytes(m.bytes.data(), m.bytes.size());
    const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
    auto out = dev().allocate(ids.size() * size_t(m.cols) * 4);
    dev().getRows(WeightRef{type, table->data(), m.rows, m.cols, m.stride}, ids.data(), int64_t(ids.size()),
                  reinterpret_cast<float*>(out->data()));
    const auto got = download<float>(dev(), *out, ids.size() * size_t(m.cols));
    for (size_t i = 0; i < ids.size(); i++) {
      ASSERT_EQ(0, std::memcmp(got.data() + i * size_t(m.cols), m.dequantized.data() + size_t(ids[i] * m.cols),
                               size_t(m.cols) * 4))
          << "row " << ids[i];
    }
  }
}

TEST_P(OpConformance, GetRowsRejectsTokenIdsOutsideTheTable) {
  const Matrix m = randomMatrix(TensorType::kF32, 4, 32, 1);
  auto table = dev().adoptHostBytes(m.bytes.data(), m.bytes.size());
  auto out = dev().allocate(32 * 4);
  for (int32_t bad : {4, -1}) {
    EXPECT_THROW(dev().getRows(WeightRef{m.type, table->data(), 4, 32, m.stride}, &bad, 1,
                               reinterpret_cast<float*>(out->data())),
                 Error)
        << bad;
  }
}

// Products of every type against the float64 sum over the exact dequantized weights (within the
// integer contract for the types a backend runs on integer dot products) and against the CPU
// reference; and prefill equal to decode bit for bit: each token of a batch gets the bits it gets
// alone, and a repeat gets the same bits.
TEST_P(OpConformance, MatmulOfEveryTypeMatchesTheTruthAndATokensBitsAreTheSameAloneOrInABatch) {
  constexpr int64_t kRows = 37;
  for (TensorType type : kWeightTypes) {
    const int64_t cols = colsFor(type);
    const bool quantized = quant::typeTraits(type).blockElems > 1;
    const Matrix m = randomMatrix(type, kRows, cols, freshSeed() * 7 + uint32_t(type));
    auto w = dev().adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef dw{type, w->data(), kRows, cols, m.stride};
    const WeightRef cw{type, m.bytes.data(), kRows, cols, m.stride};
    const auto biasHost = randomFloats(kRows, freshSeed() + 5);
    auto bias = upload(dev(), biasHost);
    for (int64_t tokens : {1, 3, 17}) {
      SCOPED_TRACE(std::string(quant::typeName(type)) + ", " + std::to_string(tokens) + " tokens");
      const auto xHost = randomFloats(size_t(tokens * cols), freshSeed() + uint32_t(tokens));
      auto x = upload(dev(), xHost);
      auto y = dev().allocate(size_t(tokens * kRows) * 4);
      const bool withBias = tokens == 3;
      const float* b = withBias ? bias.as<float>() : nullptr;
      dev().matmul(dw, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()), b);
      const auto got = download<float>(dev(), *y, size_t(tokens * kRows));
      std::vector<float> want(size_t(tokens * kRows));
      cpu().matmul(cw, xHost.data(), tokens, want.data(), withBias ? biasHost.data() : nullptr);
      for (int64_t t = 0; t < tokens; t++) {
        const float* xt = xHost.data() + t * cols;
        for (int64_t r = 0; r < kRows; r++) {
          double exact = withBias ? biasHost[size_t(r)] : 0.0, magnitude = std::fabs(exact);
          for (int64_t k = 0; k < cols; k++) {
            const double p = double(m.dequantized[size_t(r * cols + k)]) * xt[k];
            exact += p;
            magnitude += std::fabs(p);
          }
          const double tolerance = 2e-6 * magnitude + (quantized ? integerRounding(m, xt, r) : 0.0);
          ASSERT_NEAR(got[size_t(t * kRows + r)], exact, tolerance) << "row " << r << " token " << t;
        }
      }
      EXPECT_LE(nmse(got, want), 1e-6);
      dev().matmul(dw, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()), b);
      EXPECT_EQ(0, std::memcmp(got.data(), download<float>(dev(), *y, got.size()).data(), got.size() * 4));
      for (int64_t t : {int64_t(0), tokens - 1}) {
        dev().matmul(dw, x.as<float>() + t * cols, 1, reinterpret_cast<float*>(y->data()), b);
        const auto alone = download<float>(dev(), *y, size_t(kRows));
        EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + t * kRows, size_t(kRows) * 4)) << "token " << t;
      }
    }
  }
}

// The products of one input (a layer's q, k and v - v in q6_K as Q4_K_M files have it, biases as
// qwen2 has - and its gate and up, beside a float matrix) through matmuls(): the bits of the
// products run one by one, for decode, small batches and prompts, with and without prompt rows
// (setPromptRows: a prompt path where the device has one, the ordinary one for the rest).
TEST_P(OpConformance, GroupedProductsGiveTheBitsOfSeparateOnes) {
  constexpr int64_t kCols = 512;
  const Matrix mq = randomMatrix(TensorType::kQ4_K, 96, kCols, freshSeed() + 31);
  const Matrix mk = randomMatrix(TensorType::kQ4_K, 40, kCols, freshSeed() + 32);
  const Matrix mv = randomMatrix(TensorType::kQ6_K, 40, kCols, freshSeed() + 33);
  const Matrix mu = randomMatrix(TensorType::kQ4_K, 1030, kCols, freshSeed() + 34);
  const Matrix mf = randomMatrix(TensorType::kF16, 24, kCols, freshSeed() + 37);
  std::vector<std::unique_ptr<DeviceBuffer>> weights;
  const auto ref = [&](const Matrix& m) {
    weights.push_back(dev().adoptHostBytes(m.bytes.data(), m.bytes.size()));
    return WeightRef{m.type, weights.back()->data(), m.rows, m.cols, m.stride};
  };
  const WeightRef q = ref(mq), k = ref(mk), v = ref(mv), up = ref(mu), f = ref(mf);
  auto bias = upload(dev(), randomFloats(96 + 40 + 40, freshSeed() + 35));
  const float* bq = bias.as<float>();
  for (const auto& [tokens, promptRows] : std::vector<std::pair<int64_t, std::vector<Device::RowRange>>>{
           {1, {}}, {3, {}}, {12, {}}, {40, {}}, {40, {{0, 39}}}, {40, {{2, 20}, {24, 39}}}}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens, " + std::to_string(promptRows.size()) + " prompt ranges");
    dev().setPromptRows(promptRows, tokens);
    auto x = upload(dev(), randomFloats(size_t(tokens * kCols), freshSeed() + 36 + uint32_t(tokens), 2.0f));
    for (int group = 0; group < 2; group++) {
      const std::vector<WeightRef> ws = group == 0 ? std::vector{q, k, v} : std::vector{up, k, f};
      const std::vector<const float*> biases =
          group == 0 ? std::vector{bq, bq + 96, bq + 136} : std::vector<const float*>{nullptr, nullptr, nullptr};
      std::vector<std::unique_ptr<DeviceBuffer>> together, alone;
      std::vector<MatmulTarget> targets;
      for (size_t i = 0; i < ws.size(); i++) {
        together.push_back(dev().allocate(size_t(tokens * ws[i].rows) * 4));
        alone.push_back(dev().allocate(size_t(tokens * ws[i].rows) * 4));
        targets.push_back({ws[i], reinterpret_cast<float*>(together.back()->data()), biases[i]});
      }
      dev().matmuls(targets, x.as<float>(), tokens);
      for (size_t i = 0; i < ws.size(); i++) {
        dev().matmul(ws[i], x.as<float>(), tokens, reinterpret_cast<float*>(alone[i]->data()), biases[i]);
      }
      for (size_t i = 0; i < ws.size(); i++) {
        SCOPED_TRACE(i);
        const size_t n = size_t(tokens * ws[i].rows);
        EXPECT_EQ(0, std::memcmp(download<float>(dev(), *together[i], n).data(),
                                 download<float>(dev(), *alone[i], n).data(), n * 4));
      }
    }
  }
  dev().setPromptRows({}, 0);
}

// An input quantized once for the integer products that share it (q, k and v) is quantized again
// after anything writes it: an op, then a copy, each followed by the product of the new input.
TEST_P(OpConformance, AnInputWrittenBetweenProductsIsReadAfresh) {
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ8_0, TensorType::kF32}) {
    SCOPED_TRACE(quant::typeName(type));
    const Matrix m = randomMatrix(type, 64, 512, freshSeed() + 50 + uint32_t(type));
    auto w = dev().adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef dw{type, w->data(), m.rows, m.cols, m.stride};
    const auto alone = [&](const std::vector<float>& xHost) {
      auto x = upload(dev(), xHost);
      auto y = dev().allocate(size_t(m.rows) * 4);
      dev().matmul(dw, x.as<float>(), 1, reinterpret_cast<float*>(y->data()), nullptr);
      return download<float>(dev(), *y, size_t(m.rows));
    };
    const auto x0 = randomFloats(512, freshSeed() + 51), d = randomFloats(512, freshSeed() + 52);
    const auto x2 = randomFloats(512, freshSeed() + 53);
    std::vector<float> x1(512);
    for (size_t i = 0; i < x1.size(); i++) x1[i] = x0[i] + d[i];
    auto x = upload(dev(), x0);
    auto dd = upload(dev(), d);
    auto y = dev().allocate(size_t(3 * m.rows) * 4);
    auto* ys = reinterpret_cast<float*>(y->data());
    dev().matmul(dw, x.as<float>(), 1, ys, nullptr);
    dev().add(x.as<float>(), dd.as<float>(), 512);
    dev().matmul(dw, x.as<float>(), 1, ys + m.rows, nullptr);
    dev().copyFromHost(x.buffer->data(), x2.data(), x2.size() * 4);
    dev().matmul(dw, x.as<float>(), 1, ys + 2 * m.rows, nullptr);
    const auto got = download<float>(dev(), *y, size_t(3 * m.rows));
    const size_t row = size_t(m.rows) * 4;
    EXPECT_EQ(0, std::memcmp(got.data(), alone(x0).data(), row));
    EXPECT_EQ(0, std::memcmp(got.data() + m.rows, alone(x1).data(), row)) << "after an op wrote the input";
    EXPECT_EQ(0, std::memcmp(got.data() + 2 * m.rows, alone(x2).data(), row)) << "after a copy wrote the input";
  }
}

TEST_P(OpConformance, RmsNormMatchesTheReference) {
  for (int64_t dim : {64, 517, 2048}) {
    SCOPED_TRACE(dim);
    const int64_t rows = 5;
    const auto xHost = randomFloats(size_t(rows * dim), freshSeed() + uint32_t(dim), 3.0f);
    const auto wHost = randomFloats(size_t(dim), freshSeed() + 1, 0.2f, 1.0f);
    auto x = upload(dev(), xHost);
    auto w = upload(dev(), wHost);
    auto out = dev().allocate(xHost.size() * 4);
    dev().rmsNorm(x.as<float>(), w.as<float>(), reinterpret_cast<float*>(out->data()), rows, dim, 1e-5f);
    std::vector<float> want(xHost.size());
    cpu().rmsNorm(xHost.data(), wHost.data(), want.data(), rows, dim, 1e-5f);
    const auto got = download<float>(dev(), *out, want.size());
    for (size_t i = 0; i < want.size(); i++) ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << i;
  }
}

TEST_P(OpConformance, RopeIsBitIdenticalToTheReferenceInEveryVariant) {
  const int heads = 3, headDim = 64;
  const std::vector<int32_t> positions = {0, 1, 7, 130, 4095, 100000};
  std::vector<float> factors(16);
  for (size_t i = 0; i < factors.size(); i++) factors[i] = 1.0f + float(i) * 0.75f;
  struct Variant {
    const char* name;
    RopeParams params;
  };
  const RopeParams normal{64, 10000.0f, 1.0f, nullptr, false};
  const RopeParams neox{64, 1000000.0f, 1.0f, nullptr, true};
  const RopeParams partial{32, 500000.0f, 0.25f, factors.data(), false};
  const RopeParams longRope{32, 10000.0f, 1.0f, factors.data(), true, 1.1902381f};  // Phi-4-mini's kind
  for (const Variant& v : {Variant{"normal", normal}, Variant{"neox", neox}, Variant{"llama3 partial", partial},
                           Variant{"longrope partial", longRope}}) {
    SCOPED_TRACE(v.name);
    const auto xHost = randomFloats(positions.size() * heads * headDim, freshSeed() + 3);
    auto x = upload(dev(), xHost);
    dev().rope(x.as<float>(), int64_t(positions.size()), heads, headDim, positions.data(), v.params);
    std::vector<float> want = xHost;
    cpu().rope(want.data(), int64_t(positions.size()), heads, headDim, positions.data(), v.params);
    EXPECT_EQ(0, std::memcmp(download<float>(dev(), *x.buffer, want.size()).data(), want.data(), want.size() * 4));
  }
}

// LongRoPE's attention factor scales the rotated dims only: with a factor of 2 (exact in float)
// they are twice those of factor 1, and the dims past the rotary ones are the input's.
TEST_P(OpConformance, RopeAttentionFactorScalesTheRotatedDimsAndNoOthers) {
  const int heads = 2, headDim = 64, rotary = 48;
  const std::vector<int32_t> positions = {0, 5, 9000};
  const auto xHost = randomFloats(positions.size() * heads * headDim, freshSeed() + 5);
  auto x = upload(dev(), xHost);
  dev().rope(x.as<float>(), int64_t(positions.size()), heads, headDim, positions.data(),
             RopeParams{rotary, 10000.0f, 1.0f, nullptr, true, 2.0f});
  const auto got = download<float>(dev(), *x.buffer, xHost.size());
  std::vector<float> plain = xHost;
  cpu().rope(plain.data(), int64_t(positions.size()), heads, headDim, positions.data(),
             RopeParams{rotary, 10000.0f, 1.0f, nullptr, true, 1.0f});
  for (size_t i = 0; i < got.size(); i++) {
    const bool rotated = int(i % headDim) < rotary;
    ASSERT_EQ(got[i], rotated ? 2.0f * plain[i] : xHost[i]) << i;
  }
}

TEST_P(OpConformance, SwigluAddAndScaleMatchTheReference) {
  const int64_t n = 100003;
  const auto gHost = randomFloats(size_t(n), freshSeed() + 11, 4.0f);
  const auto uHost = randomFloats(size_t(n), freshSeed() + 12);
  auto g = upload(dev(), gHost);
  auto u = upload(dev(), uHost);
  auto out = dev().allocate(size_t(n) * 4);
  dev().swiglu(g.as<float>(), u.as<float>(), reinterpret_cast<float*>(out->data()), n);
  std::vector<float> want(static_cast<size_t>(n));
  cpu().swiglu(gHost.data(), uHost.data(), want.data(), n);
  auto got = download<float>(dev(), *out, size_t(n));
  // SPIR-V's precision rules let exp(x) be 3 + 2|x| ulp off and a division 2.5 ulp, so the bound
  // grows with the gate; 8 ulp cover the division, the products' roundings and the CPU's own exp.
  for (size_t i = 0; i < want.size(); i++) {
    const float ulps = 8.0f + 2.0f * std::fabs(gHost[i]);
    ASSERT_NEAR(got[i], want[i], ulps * FLT_EPSILON * std::fabs(want[i]) + 1e-30) << i << " gate " << gHost[i];
  }
  dev().add(g.as<float>(), u.as<float>(), n);
  want = gHost;
  cpu().add(want.data(), uHost.data(), n);
  got = download<float>(dev(), *g.buffer, size_t(n));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
  // A product per element, correctly rounded everywhere: the CPU's bits.
  dev().scale(g.as<float>(), 0.3713f, n);
  cpu().scale(want.data(), 0.3713f, n);
  got = download<float>(dev(), *g.buffer, size_t(n));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
}

// Two sessions' KV in shuffled pages, stored through kvStore; the pages are the reference's byte
// for byte (fp16 rounding included). Attention for a batch mixing a prefill run of one session
// and a decode token of the other matches the reference, and gives each query the bits it gets
// alone (prefill equals decode).
void checkPagedAttention(Device& dev, Device& cpu, KvPrecision precision, uint32_t seed) {
  KvLayout kv{4, 2, 16, precision};
  const int heads = 6;
  const int64_t lengths[2] = {23, 9};
  const int pagesPerSession = 6;
  auto devPages = dev.allocate(kv.pageBytes() * 2 * pagesPerSession);
  std::vector<uint8_t> cpuPages(kv.pageBytes() * 2 * pagesPerSession, 0);
  dev.copyFromHost(devPages->data(), cpuPages.data(), cpuPages.size());  // slots no token writes compare equal
  std::vector<int> order(2 * pagesPerSession);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<std::vector<const uint8_t*>> devTables(2), cpuTables(2);
  for (int s = 0; s < 2; s++) {
    for (int p = 0; p < pagesPerSession; p++) {
      const size_t off = size_t(order[size_t(s * pagesPerSession + p)]) * kv.pageBytes();
      devTables[size_t(s)].push_back(devPages->data() + off);
      cpuTables[size_t(s)].push_back(cpuPages.data() + off);
    }
  }
  const int64_t width = int64_t(kv.kvHeads) * kv.headDim;
  for (int s = 0; s < 2; s++) {
    const int64_t n = lengths[s];
    const auto k = randomFloats(size_t(n * width), seed + 10 + uint32_t(s));
    const auto v = randomFloats(size_t(n * width), seed + 20 + uint32_t(s));
    auto dk = upload(dev, k);
    auto dv = upload(dev, v);
    std::vector<KvSlot> dSlots, cSlots;
    for (int64_t t = 0; t < n; t++) {
      dSlots.push_back({const_cast<uint8_t*>(devTables[size_t(s)][size_t(t / kv.pageTokens)]), int(t % kv.pageTokens)});
      cSlots.push_back({const_cast<uint8_t*>(cpuTables[size_t(s)][size_t(t / kv.pageTokens)]), int(t % kv.pageTokens)});
    }
    dev.kvStore(dk.as<float>(), dv.as<float>(), n, dSlots.data(), kv);
    cpu.kvStore(k.data(), v.data(), n, cSlots.data(), kv);
  }
  ASSERT_EQ(0,
            std::memcmp(download<uint8_t>(dev, *devPages, cpuPages.size()).data(), cpuPages.data(), cpuPages.size()));

  const std::vector<int32_t> positions = {18, 19, 20, 21, 22, 8};  // session 0's last five, session 1's last
  std::vector<const uint8_t*const*> dT, cT;
  for (size_t t = 0; t < positions.size(); t++) {
    dT.push_back(devTables[t < 5 ? 0 : 1].data());
    cT.push_back(cpuTables[t < 5 ? 0 : 1].data());
  }
  const size_t perToken = size_t(heads) * size_t(kv.headDim);
  const auto q = randomFloats(positions.size() * perToken, seed + 30, 2.0f);
  auto dq = upload(dev, q);
  auto dout = dev.allocate(q.size() * 4);
  AttentionBatch b;
  b.tokens = int64_t(positions.size());
  b.heads = heads;
  b.kv = kv;
  b.scale = 0.25f;
  b.positions = positions.data();
  b.pageTables = dT.data();
  dev.attention(dq.as<float>(), reinterpret_cast<float*>(dout->data()), b);
  std::vector<float> want(q.size());
  b.pageTables = cT.data();
  cpu.attention(q.data(), want.data(), b);
  const auto got = download<float>(dev, *dout, want.size());
  EXPECT_LT(nmse(got, want), 1e-12);
  for (size_t i = 0; i < want.size(); i++) ASSERT_NEAR(got[i], want[i], 2e-6) << i;
  for (size_t t = 0; t < positions.size(); t++) {
    AttentionBatch one = b;
    one.tokens = 1;
    one.positions = &positions[t];
    one.pageTables = &dT[t];
    dev.attention(dq.as<float>() + t * perToken, reinterpret_cast<float*>(dout->data()), one);
    EXPECT_EQ(0, std::memcmp(download<float>(dev, *dout, perToken).data(), got.data() + t * perToken, perToken * 4))
        << "query " << t << " alone";
  }
}

TEST_P(OpConformance, KvStoreAndAttentionOverShuffledFp32PagesMatchTheReference) {
  checkPagedAttention(dev(), cpu(), KvPrecision::kF32, freshSeed());
}

TEST_P(OpConformance, KvStoreAndAttentionOverShuffledFp16PagesMatchTheReference) {
  checkPagedAttention(dev(), cpu(), KvPrecision::kF16, freshSeed() + 1);
}

// rope of q and k and kvStore of k and v as one op: the reference's rotated q and k and its pages,
// bit for bit, in fp32 and fp16 pages, adjacent-pair and neox rotation, a partial rotation.
TEST_P(OpConformance, RopeAndStoreIsRopeThenKvStore) {
  const int heads = 6, kvHeads = 2, headDim = 32;
  const std::vector<int32_t> positions = {3, 0, 17, 130, 4095};
  const int64_t tokens = int64_t(positions.size());
  for (KvPrecision precision : {KvPrecision::kF32, KvPrecision::kF16}) {
    for (const RopeParams& params :
         {RopeParams{32, 10000.0f, 1.0f, nullptr, false}, RopeParams{16, 1000000.0f, 0.5f, nullptr, true},
          RopeParams{24, 10000.0f, 1.0f, nullptr, true, 1.1902381f}}) {
      SCOPED_TRACE(std::string(precision == KvPrecision::kF16 ? "fp16" : "fp32") + (params.neox ? " neox" : "") +
                   (params.attnFactor != 1.0f ? " longrope" : ""));
      const KvLayout kv{4, kvHeads, headDim, precision};
      const int64_t width = int64_t(kvHeads) * headDim;
      const auto qHost = randomFloats(size_t(tokens * heads * headDim), freshSeed() + 41);
      const auto kHost = randomFloats(size_t(tokens * width), freshSeed() + 42);
      const auto vHost = randomFloats(size_t(tokens * width), freshSeed() + 43);
      auto q = upload(dev(), qHost);
      auto k = upload(dev(), kHost);
      auto v = upload(dev(), vHost);
      std::vector<uint8_t> cpuPages(3 * kv.pageBytes(), 0);
      auto devPages = dev().allocate(cpuPages.size());
      dev().copyFromHost(devPages->data(), cpuPages.data(), cpuPages.size());
      std::vector<KvSlot> dSlots, cSlots;
      for (int64_t t = 0; t < tokens; t++) {  // pages out of order, slots scattered
        const size_t page = size_t(2 - t % 3) * kv.pageBytes();
        const int slot = int((t * 3) % kv.pageTokens);
        dSlots.push_back({devPages->data() + page, slot});
        cSlots.push_back({cpuPages.data() + page, slot});
      }
      dev().ropeAndStore(q.as<float>(), k.as<float>(), v.as<float>(), tokens, heads, kvHeads, positions.data(), params,
                         dSlots.data(), kv);
      std::vector<float> wantQ = qHost, wantK = kHost;
      cpu().ropeAndStore(wantQ.data(), wantK.data(), vHost.data(), tokens, heads, kvHeads, positions.data(), params,
                         cSlots.data(), kv);
      EXPECT_EQ(0, std::memcmp(download<float>(dev(), *q.buffer, wantQ.size()).data(), wantQ.data(), wantQ.size() * 4));
      EXPECT_EQ(0, std::memcmp(download<float>(dev(), *k.buffer, wantK.size()).data(), wantK.data(), wantK.size() * 4));
      EXPECT_EQ(0, std::memcmp(download<uint8_t>(dev(), *devPages, cpuPages.size()).data(), cpuPages.data(),
                               cpuPages.size()));
    }
  }
}

// Sampling's first half on the device: each row's candidates after the penalty are the host's
// selectCandidates() bit for bit - ids, values and order - for one candidate (the argmax) up to
// the most a sampler asks for, with ties, -0 beside +0, NaN and infinities in the rows, and rows
// of different requests in one call.
TEST_P(OpConformance, CandidatesSelectedOnTheDeviceAreTheHostsBitForBit) {
  constexpr int64_t kVocab = 50021;  // odd: the last block of threads is partial
  const std::vector<int32_t> counts = {1, 1, 40, 1024, 7, 1024};
  const int64_t rows = int64_t(counts.size()), stride = 1024;
  std::vector<float> host(size_t(rows * kVocab));
  std::mt19937 rng(freshSeed() + 61);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : host) v = normal(rng);
  float* r1 = host.data() + kVocab;  // row 1: a tie for the maximum, the later id must lose
  r1[100] = r1[90000 % kVocab] = 50.0f;
  float* r3 = host.data() + 3 * kVocab;  // row 3: few distinct values, so the 1024th is a tie
  for (int64_t i = 0; i < kVocab; i++) r3[i] = float(int(std::fabs(normal(rng))) % 4);
  r3[5] = -0.0f;
  r3[6] = std::numeric_limits<float>::quiet_NaN();
  r3[7] = std::numeric_limits<float>::infinity();
  r3[8] = -std::numeric_limits<float>::infinity();
  float* r5 = host.data() + 5 * kVocab;  // row 5: every value equal
  for (int64_t i = 0; i < kVocab; i++) r5[i] = (i % 3 == 0) ? 0.0f : -0.0f;
  const std::vector<int32_t> recent = {3, 100, 90000 % kVocab, 17, 42};
  std::vector<CandidateRequest> requests;
  for (size_t r = 0; r < counts.size(); r++) {
    CandidateRequest q;
    q.count = counts[r];
    if (r % 2 == 1) {
      q.repeatPenalty = 1.3f;
      q.penalized = recent;
    }
    requests.push_back(q);
  }
  std::vector<int32_t> wantIds(size_t(rows * stride)), gotIds(size_t(rows * stride));
  std::vector<float> wantValues(size_t(rows * stride)), gotValues(size_t(rows * stride));
  for (int64_t r = 0; r < rows; r++) {
    selectCandidates(host.data() + r * kVocab, kVocab, requests[size_t(r)], wantIds.data() + r * stride,
                     wantValues.data() + r * stride);
  }
  auto logits = upload(dev(), host);
  dev().selectCandidates(logits.as<float>(), rows, kVocab, requests, gotIds.data(), gotValues.data(), stride);
  for (int64_t r = 0; r < rows; r++) {
    SCOPED_TRACE("row " + std::to_string(r));
    const size_t at = size_t(r * stride), n = size_t(counts[size_t(r)]);
    EXPECT_TRUE(std::equal(wantIds.begin() + at, wantIds.begin() + at + n, gotIds.begin() + at));
    EXPECT_EQ(0, std::memcmp(wantValues.data() + at, gotValues.data() + at, n * sizeof(float)));
  }
  EXPECT_EQ(wantIds[size_t(stride)], 100) << "a tie for the maximum goes to the lower id";
}

// A device whose memory is not host memory checks every pointer an op is given: a host pointer,
// or a range running from one buffer into the next, is refused before it is written through.
TEST_P(OpConformance, PointersOutsideTheDevicesBuffersAreRefused) {
  if (dev().info().caps.hostMemory) GTEST_SKIP() << GetParam() << "'s memory is host memory: any pointer is its own";
  auto small = open(size_t(1) << 20);
  std::vector<float> host(16);
  EXPECT_THROW(small->add(host.data(), host.data(), 16), Error);
  EXPECT_THROW(small->copyToHost(host.data(), reinterpret_cast<const uint8_t*>(host.data()), 64), Error);
  auto x = small->allocate(1024), y = small->allocate(1024);
  auto* xf = reinterpret_cast<float*>(x->data());
  auto* yf = reinterpret_cast<float*>(y->data());
  small->add(xf, yf, 256);                             // the whole of each: fine
  EXPECT_THROW(small->add(xf, yf, 512), Error);        // 2 KiB from 1 KiB buffers
  EXPECT_THROW(small->add(xf + 128, yf, 256), Error);  // starts inside, ends past
}

INSTANTIATE_TEST_SUITE_P(Backends, OpConformance, ::testing::ValuesIn(builtinNames()), testName);

}  // namespace
}  // namespace jitllm::testing
