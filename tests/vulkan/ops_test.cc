// Every op of the Vulkan device against the CPU device, on fresh random inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"
#include "tests/gpu/integer_product_checks.h"
#include "tests/gpu/long_context.h"
#include "tests/vulkan/vulkan_test_support.h"

namespace jitllm::testing {
namespace {

using quant::TensorType;

constexpr TensorType kTypes[] = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
    TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
};

// A fresh seed per run, printed, so failures reproduce (JITLLM_TEST_SEED=N fixes it).
uint32_t freshSeed() {
  static const uint32_t seed = [] {
    const char* fixed = std::getenv("JITLLM_TEST_SEED");
    const uint32_t s = fixed ? uint32_t(std::strtoul(fixed, nullptr, 10)) : std::random_device{}();
    std::printf("vulkan ops: random seed %u (JITLLM_TEST_SEED=%u reproduces)\n", s, s);
    return s;
  }();
  return seed;
}

// Float types get an odd row length (a partial last chunk); quantized ones two super-blocks.
int64_t colsFor(TensorType type) { return quant::typeTraits(type).blockElems == 1 ? 517 : 512; }

struct Matrix {
  TensorType type;
  int64_t rows, cols;
  size_t stride;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;
};

Matrix randomMatrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m{type, rows, cols, 0, {}, {}};
  m.stride = *quant::rowBytes(type, cols) + 8;  // rows padded: kernels must honour the stride
  m.bytes.assign(m.stride * size_t(rows), 0xAB);
  m.dequantized.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; r++) {
    const auto row = randomFloats(size_t(cols), seed + uint32_t(r), 1.0f + float(r % 5), float(r % 3) * 0.5f);
    quant::quantizeRow(type, row.data(), m.bytes.data() + size_t(r) * m.stride, cols);
    quant::dequantizeRow(type, m.bytes.data() + size_t(r) * m.stride, m.dequantized.data() + r * cols, cols);
  }
  return m;
}

class VulkanOps : public ::testing::Test {
 protected:
  void SetUp() override {
    JITLLM_REQUIRE_VULKAN();
    gpu = makeVulkanDevice();
    cpu = makeCpuDevice();
  }
  std::unique_ptr<vulkan::VulkanDevice> gpu;
  std::unique_ptr<cpu::CpuDevice> cpu;
};

TEST_F(VulkanOps, GetRowsDecodesEveryWeightTypeBitIdenticallyToTheCpu) {
  for (TensorType type : kTypes) {
    SCOPED_TRACE(quant::typeName(type));
    const Matrix m = randomMatrix(type, 11, colsFor(type), freshSeed() + uint32_t(type));
    auto table = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
    auto out = gpu->allocate(ids.size() * size_t(m.cols) * 4);
    gpu->getRows(WeightRef{type, table->data(), m.rows, m.cols, m.stride}, ids.data(), int64_t(ids.size()),
                 reinterpret_cast<float*>(out->data()));
    const auto got = download<float>(*gpu, *out, ids.size() * size_t(m.cols));
    for (size_t i = 0; i < ids.size(); i++) {
      ASSERT_EQ(0, std::memcmp(got.data() + i * size_t(m.cols), m.dequantized.data() + size_t(ids[i] * m.cols),
                               size_t(m.cols) * 4))
          << "row " << ids[i];
    }
  }
}

TEST_F(VulkanOps, GetRowsRejectsTokenIdsOutsideTheTable) {
  const Matrix m = randomMatrix(TensorType::kF32, 4, 32, 1);
  auto table = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
  auto out = gpu->allocate(32 * 4);
  const int32_t bad = 4;
  EXPECT_THROW(
      gpu->getRows(WeightRef{m.type, table->data(), 4, 32, m.stride}, &bad, 1, reinterpret_cast<float*>(out->data())),
      Error);
}

TEST_F(VulkanOps, MatmulOfEveryTypeMatchesTheCpuAndATokensResultIsTheSameAloneOrInABatch) {
  constexpr int64_t kRows = 37;
  for (TensorType type : kTypes) {
    const int64_t cols = colsFor(type);
    const Matrix m = randomMatrix(type, kRows, cols, freshSeed() * 7 + uint32_t(type));
    auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef gw{type, w->data(), kRows, cols, m.stride};
    const WeightRef cw{type, m.bytes.data(), kRows, cols, m.stride};
    const auto biasHost = randomFloats(kRows, freshSeed() + 5);
    auto bias = upload(*gpu, biasHost);
    for (int64_t tokens : {1, 3, 17}) {
      SCOPED_TRACE(std::string(quant::typeName(type)) + ", " + std::to_string(tokens) + " tokens");
      const auto xHost = randomFloats(size_t(tokens * cols), freshSeed() + uint32_t(tokens));
      auto x = upload(*gpu, xHost);
      auto y = gpu->allocate(size_t(tokens * kRows) * 4);
      const bool withBias = tokens == 3;
      gpu->matmul(gw, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()),
                  withBias ? bias.as<float>() : nullptr);
      const auto got = download<float>(*gpu, *y, size_t(tokens * kRows));
      std::vector<float> want(size_t(tokens * kRows));
      cpu->matmul(cw, xHost.data(), tokens, want.data(), withBias ? biasHost.data() : nullptr);
      // Against the float64 sum over the CPU's exact dequantized weights (the reference the CPU
      // kernels are held to), and against the CPU device itself.
      // q4_K and q6_K run on the integer kernels (matmul_int.comp), whose activations are off by at
      // most s/512, s <= amax/63.5 of the element's block of 32 (quantize_x.comp).
      const bool integer = (type == TensorType::kQ4_K || type == TensorType::kQ6_K) && cols % 256 == 0;
      for (int64_t t = 0; t < tokens; t++) {
        for (int64_t r = 0; r < kRows; r++) {
          double exact = withBias ? biasHost[size_t(r)] : 0.0, magnitude = std::fabs(exact), rounding = 0;
          for (int64_t k = 0; k < cols; k++) {
            const double p = double(m.dequantized[size_t(r * cols + k)]) * xHost[size_t(t * cols + k)];
            exact += p;
            magnitude += std::fabs(p);
            if (integer) {
              float amax = 0;
              for (int64_t i = k / 32 * 32; i < k / 32 * 32 + 32; i++) {
                amax = std::max(amax, std::fabs(xHost[size_t(t * cols + i)]));
              }
              rounding += std::fabs(double(m.dequantized[size_t(r * cols + k)])) * amax / (63.5 * 512);
            }
          }
          ASSERT_NEAR(got[size_t(t * kRows + r)], exact, 2e-6 * magnitude + rounding) << "row " << r << " token " << t;
        }
      }
      // The CPU device may round activations for its integer paths (tests/quant/matmul_test.cc
      // allows for it), so against it the bar is the engine-core tolerance.
      EXPECT_LE(nmse(got, want), 1e-6);
      // The same bits again, and for each token alone (decode) as in the batch (prefill).
      gpu->matmul(gw, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()),
                  withBias ? bias.as<float>() : nullptr);
      EXPECT_EQ(0, std::memcmp(got.data(), download<float>(*gpu, *y, got.size()).data(), got.size() * 4));
      if (tokens > 1) {
        for (int64_t t : {int64_t(0), tokens - 1}) {
          gpu->matmul(gw, x.as<float>() + t * cols, 1, reinterpret_cast<float*>(y->data()),
                      withBias ? bias.as<float>() : nullptr);
          const auto alone = download<float>(*gpu, *y, size_t(kRows));
          EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + t * kRows, size_t(kRows) * 4)) << "token " << t;
        }
      }
    }
  }
}

// The integer kernels (q4_K, q6_K) against the float ones on the same device, with the device's
// dot product instructions and spelt out; and the quantized input q, k and v share is quantized
// again after anything writes it (tests/gpu/integer_product_checks.h).
TEST_F(VulkanOps, IntegerProductsMatchTheFloatKernelsAndRequantizeAWrittenInput) {
  vulkan::VulkanDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.integerMatmul = false;
  auto floats = vulkan::VulkanDevice::create(o);
  // And the integer kernels with their dot products spelt out, where the device has instructions:
  // the same integers, so the same bits.
  o.integerMatmul = true;
  o.integerDotProduct = false;
  auto spelt = vulkan::VulkanDevice::create(o);
  std::printf("%s: integer dot product instructions: %s\n", gpu->info().id.str().c_str(),
              gpu->usesIntegerDotProduct() ? "yes" : "no (spelt out)");
  constexpr int64_t kRows = 64, kCols = 512;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(quant::typeName(type)));
    const Matrix m = randomMatrix(type, kRows, kCols, freshSeed() + 11 * uint32_t(type));
    auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    auto wf = floats->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef gw{type, w->data(), kRows, kCols, m.stride};
    // The integer kernels against the float ones, and their dot products spelt out.
    const auto alone = [&](Device& dev, const WeightRef& wr) {
      auto x = upload(dev, randomFloats(size_t(kCols), freshSeed() + 1));
      auto y = dev.allocate(size_t(wr.rows) * 4);
      dev.matmul(wr, x.as<float>(), 1, reinterpret_cast<float*>(y->data()), nullptr);
      return download<float>(dev, *y, size_t(wr.rows));
    };
    const auto got = alone(*gpu, gw);
    const double error = nmse(got, alone(*floats, WeightRef{type, wf->data(), kRows, kCols, m.stride}));
    EXPECT_LT(error, 1e-8);
    EXPECT_GT(error, 0.0) << "the integer kernels did not run";
    auto ws0 = spelt->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const auto spelt0 = alone(*spelt, WeightRef{type, ws0->data(), kRows, kCols, m.stride});
    EXPECT_EQ(0, std::memcmp(spelt0.data(), got.data(), got.size() * 4)) << "spelt-out dot products";

    const Matrix sq = randomMatrix(type, kCols, kCols, freshSeed() + 5);
    auto ws = gpu->adoptHostBytes(sq.bytes.data(), sq.bytes.size());
    expectWrittenInputsQuantizedAgain(*gpu, gw, WeightRef{type, ws->data(), kCols, kCols, sq.stride}, freshSeed());
  }
}

// rmsNorm and attention write their output's integer form for the products after it (QUANTIZE in
// rms_norm.comp and attention.comp): the same bytes quantize_x would write, so the products' bits
// do not depend on which ran. An in-place norm (whose fused part would read overwritten inputs)
// leaves it to quantize_x.
TEST_F(VulkanOps, ProducersQuantizeTheirOutputForTheProductsAfterItWithQuantizeXsBits) {
  constexpr int64_t kRows = 96, kCols = 512, kTokens = 3;
  const Matrix m = randomMatrix(TensorType::kQ4_K, kRows, kCols, freshSeed() + 21);
  auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
  const WeightRef gw{TensorType::kQ4_K, w->data(), kRows, kCols, m.stride};
  auto x = upload(*gpu, randomFloats(size_t(kTokens * kCols), freshSeed() + 22, 3.0f));
  auto norm = upload(*gpu, randomFloats(size_t(kCols), freshSeed() + 24, 0.2f, 1.0f));
  auto out = gpu->allocate(size_t(kTokens * kCols) * 4);
  auto y = gpu->allocate(size_t(2 * kTokens * kRows) * 4);
  auto* o = reinterpret_cast<float*>(out->data());
  auto* ys = reinterpret_cast<float*>(y->data());
  // The same product on a copy of the producer's output, which only quantize_x can quantize.
  const auto separately = [&](const DeviceBuffer& produced) {
    auto copy = upload(*gpu, download<float>(*gpu, produced, size_t(kTokens * kCols)));
    const uint64_t before = gpu->separateQuantizations();
    gpu->matmul(gw, copy.as<float>(), kTokens, ys, nullptr);
    EXPECT_EQ(before + 1, gpu->separateQuantizations());
    return download<float>(*gpu, *y, size_t(kTokens * kRows));
  };
  // `produce` writes `o`; then two products read it (as q, k and v do) with no quantize_x.
  const auto check = [&](const std::function<void()>& produce) {
    const uint64_t fused = gpu->fusedQuantizations(), separate = gpu->separateQuantizations();
    produce();
    gpu->matmul(gw, o, kTokens, ys, nullptr);
    gpu->matmul(gw, o, kTokens, ys + kTokens * kRows, nullptr);
    EXPECT_EQ(fused + 1, gpu->fusedQuantizations());
    EXPECT_EQ(separate, gpu->separateQuantizations());
    const auto got = download<float>(*gpu, *y, size_t(2 * kTokens * kRows));
    const auto want = separately(*out);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
    EXPECT_EQ(0, std::memcmp(got.data() + want.size(), want.data(), want.size() * 4));
  };
  {
    SCOPED_TRACE("rmsNorm");
    check([&] { gpu->rmsNorm(x.as<float>(), norm.as<float>(), o, kTokens, kCols, 1e-5f); });
  }
  // 8 heads of 64 = kCols. Three tokens over 300 positions: few workgroups, so the chunks run
  // apart and are folded after (MODE 1 + 2); over 30 positions one workgroup per head (MODE 0).
  LongContext ctx(*gpu, *cpu, KvLayout{16, 2, 64, KvPrecision::kF32}, 300, freshSeed() + 25);
  auto q = upload(*gpu, randomFloats(size_t(kTokens * kCols), freshSeed() + 26, 0.3f));
  for (const std::vector<int32_t>& positions : {std::vector<int32_t>{299, 150, 70}, std::vector<int32_t>{9, 20, 30}}) {
    SCOPED_TRACE("attention at " + std::to_string(positions[0]));
    check([&] { ctx.attendOnGpu(q.as<float>(), o, positions, 8, 0.125f); });
  }

  // In place: not fused, and the product still reads the norm's output.
  gpu->rmsNorm(x.as<float>(), norm.as<float>(), x.as<float>(), kTokens, kCols, 1e-5f);
  const uint64_t fusedBefore = gpu->fusedQuantizations(), separateBefore = gpu->separateQuantizations();
  gpu->matmul(gw, x.as<float>(), kTokens, ys, nullptr);
  EXPECT_EQ(fusedBefore, gpu->fusedQuantizations());
  EXPECT_EQ(separateBefore + 1, gpu->separateQuantizations());
  const auto inPlace = download<float>(*gpu, *y, size_t(kTokens * kRows));
  EXPECT_EQ(0, std::memcmp(inPlace.data(), separately(*x.buffer).data(), inPlace.size() * 4));
}

// Product shapes are timed once per (device, kernel, shape) and the choice is remembered on disk
// (matmul_tuner.h): the tuned device gives the untuned one's bits, and the next device with the
// same cache directory times nothing.
TEST_F(VulkanOps, ProductShapesAreTunedOnceRememberedOnDiskAndKeepTheBits) {
  const auto root = std::filesystem::temp_directory_path() / ("jitllm-vk-tune-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  const auto device = [&](bool tune) {
    vulkan::VulkanDeviceOptions o;
    o.cacheRoot = tune ? root.string() : JITLLM_TEST_KERNEL_CACHE;
    o.tune = tune;
    return vulkan::VulkanDevice::create(o);
  };
  if (device(true)->physical().timestampPeriodNs == 0) GTEST_SKIP() << gpu->info().id << " has no timestamps";
  constexpr int64_t kRows = 40, kCols = 512;
  const Matrix q4 = randomMatrix(TensorType::kQ4_K, kRows, kCols, freshSeed() + 51);
  const Matrix q8 = randomMatrix(TensorType::kQ8_0, kRows, kCols, freshSeed() + 52);
  const auto xHost = randomFloats(size_t(3 * kCols), freshSeed() + 53);
  // Both matrices at 1 and 3 tokens, and an integer product over its own input (which it can
  // repeat: it reads the quantized copy): five shapes.
  const auto products = [&](vulkan::VulkanDevice& dev) {
    std::vector<float> all;
    for (const Matrix* m : {&q4, &q8}) {
      auto w = dev.adoptHostBytes(m->bytes.data(), m->bytes.size());
      const WeightRef ref{m->type, w->data(), kRows, kCols, m->stride};
      for (int64_t tokens : {1, 3}) {
        auto x = upload(dev, xHost);
        auto y = dev.allocate(size_t(tokens * kRows) * 4);
        dev.matmul(ref, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()), nullptr);
        const auto got = download<float>(dev, *y, size_t(tokens * kRows));
        all.insert(all.end(), got.begin(), got.end());
      }
    }
    auto square = randomMatrix(TensorType::kQ4_K, kCols, kCols, freshSeed() + 54);
    auto w = dev.adoptHostBytes(square.bytes.data(), square.bytes.size());
    auto x = upload(dev, xHost);
    dev.matmul(WeightRef{square.type, w->data(), kCols, kCols, square.stride}, x.as<float>(), 2, x.as<float>(),
               nullptr);
    const auto inPlace = download<float>(dev, *x.buffer, size_t(2 * kCols));
    all.insert(all.end(), inPlace.begin(), inPlace.end());
    return all;
  };
  auto untuned = device(false);
  const auto want = products(*untuned);
  EXPECT_EQ(0u, untuned->matmulTunings());
  auto first = device(true);
  const auto tuned = products(*first);
  EXPECT_EQ(5u, first->matmulTunings());
  EXPECT_EQ(0, std::memcmp(tuned.data(), want.data(), want.size() * 4));
  std::ifstream file(first->cacheDirectory() + "/" + vulkan::MatmulTuner::kFile);
  std::string line;
  int lines = 0;
  while (std::getline(file, line)) lines++;
  EXPECT_EQ(5, lines);
  auto second = device(true);
  const auto again = products(*second);
  EXPECT_EQ(0u, second->matmulTunings());
  EXPECT_EQ(0, std::memcmp(again.data(), want.data(), want.size() * 4));
  std::filesystem::remove_all(root);
}

// Subgroup shuffles take over the reductions' narrower levels (shaders/lane_sums.glsl) and must
// give the shared-memory tree's bits: on lavapipe (8-wide subgroups) the two are mixed, on a
// 32-wide GPU the shuffles do it all.
TEST_F(VulkanOps, SubgroupShufflesGiveTheBitsOfTheSharedMemoryTree) {
  if (!gpu->physical().subgroupShuffle) GTEST_SKIP() << gpu->info().id << " has no subgroup shuffles";
  std::printf("%s: subgroups of %u\n", gpu->info().id.str().c_str(), gpu->physical().subgroupSize);
  vulkan::VulkanDeviceOptions options;
  options.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  options.subgroupShuffle = false;
  auto tree = vulkan::VulkanDevice::create(options);
  constexpr int64_t kRows = 37, kCols = 512, kTokens = 5;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(quant::typeName(type)));
    const Matrix m = randomMatrix(type, kRows, kCols, freshSeed() + 31 * uint32_t(type));
    const auto xHost = randomFloats(size_t(kTokens * kCols), freshSeed() + 32);
    const auto product = [&](Device& dev, int64_t tokens) {
      auto w = dev.adoptHostBytes(m.bytes.data(), m.bytes.size());
      auto x = upload(dev, xHost);
      auto y = dev.allocate(size_t(tokens * kRows) * 4);
      dev.matmul(WeightRef{type, w->data(), kRows, kCols, m.stride}, x.as<float>(), tokens,
                 reinterpret_cast<float*>(y->data()), nullptr);
      return download<float>(dev, *y, size_t(tokens * kRows));
    };
    for (int64_t tokens : {int64_t(1), kTokens}) {
      const auto shuffled = product(*gpu, tokens);
      EXPECT_EQ(0, std::memcmp(shuffled.data(), product(*tree, tokens).data(), shuffled.size() * 4)) << tokens;
    }
  }
}

TEST_F(VulkanOps, RmsNormMatchesTheCpu) {
  for (int64_t dim : {64, 517, 2048}) {
    SCOPED_TRACE(dim);
    const int64_t rows = 5;
    const auto xHost = randomFloats(size_t(rows * dim), freshSeed() + uint32_t(dim), 3.0f);
    const auto wHost = randomFloats(size_t(dim), freshSeed() + 1, 0.2f, 1.0f);
    auto x = upload(*gpu, xHost);
    auto w = upload(*gpu, wHost);
    auto out = gpu->allocate(xHost.size() * 4);
    gpu->rmsNorm(x.as<float>(), w.as<float>(), reinterpret_cast<float*>(out->data()), rows, dim, 1e-5f);
    std::vector<float> want(xHost.size());
    cpu->rmsNorm(xHost.data(), wHost.data(), want.data(), rows, dim, 1e-5f);
    const auto got = download<float>(*gpu, *out, want.size());
    for (size_t i = 0; i < want.size(); i++) ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << i;
  }
}

TEST_F(VulkanOps, RopeIsBitIdenticalToTheCpuInEveryVariant) {
  const int heads = 3, headDim = 64;
  const std::vector<int32_t> positions = {0, 1, 7, 130, 4095, 100000};
  std::vector<float> factors(16);
  for (size_t i = 0; i < factors.size(); i++) factors[i] = 1.0f + float(i) * 0.75f;
  struct Variant {
    const char* name;
    RopeParams params;
  };
  RopeParams normal{64, 10000.0f, 1.0f, nullptr, false};
  RopeParams neox{64, 1000000.0f, 1.0f, nullptr, true};
  RopeParams partial{32, 500000.0f, 0.25f, factors.data(), false};
  for (const Variant& v : {Variant{"normal", normal}, Variant{"neox", neox}, Variant{"llama3 partial", partial}}) {
    SCOPED_TRACE(v.name);
    const auto xHost = randomFloats(positions.size() * heads * headDim, freshSeed() + 3);
    auto x = upload(*gpu, xHost);
    gpu->rope(x.as<float>(), int64_t(positions.size()), heads, headDim, positions.data(), v.params);
    std::vector<float> want = xHost;
    cpu->rope(want.data(), int64_t(positions.size()), heads, headDim, positions.data(), v.params);
    const auto got = download<float>(*gpu, *x.buffer, want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
  }
}

TEST_F(VulkanOps, SwigluAndAddMatchTheCpu) {
  const int64_t n = 100003;
  const auto gHost = randomFloats(size_t(n), freshSeed() + 11, 4.0f);
  const auto uHost = randomFloats(size_t(n), freshSeed() + 12);
  auto g = upload(*gpu, gHost);
  auto u = upload(*gpu, uHost);
  auto out = gpu->allocate(size_t(n) * 4);
  gpu->swiglu(g.as<float>(), u.as<float>(), reinterpret_cast<float*>(out->data()), n);
  std::vector<float> want(static_cast<size_t>(n));
  cpu->swiglu(gHost.data(), uHost.data(), want.data(), n);
  auto got = download<float>(*gpu, *out, size_t(n));
  // SPIR-V's precision rules let exp(x) be 3 + 2|x| ulp off and a division 2.5 ulp, so the bound
  // grows with the gate (lavapipe's exp used it at a gate of -17); 8 ulp cover the
  // division, the products' roundings and the CPU's own exp.
  for (size_t i = 0; i < want.size(); i++) {
    const float ulps = 8.0f + 2.0f * std::fabs(gHost[i]);
    ASSERT_NEAR(got[i], want[i], ulps * FLT_EPSILON * std::fabs(want[i]) + 1e-30) << i << " gate " << gHost[i];
  }

  gpu->add(g.as<float>(), u.as<float>(), n);
  want = gHost;
  cpu->add(want.data(), uHost.data(), n);
  got = download<float>(*gpu, *g.buffer, size_t(n));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
}

// Two sessions with pages in shuffled order, a batch mixing a prefill run and a decode token.
void checkPagedAttention(Device& gpu, Device& cpu, KvPrecision precision, uint32_t seed) {
  KvLayout kv{4, 2, 16, precision};
  const int heads = 6;
  const int64_t lengths[2] = {23, 9};
  const int pagesPerSession = 6;
  auto gpuPages = gpu.allocate(kv.pageBytes() * 2 * pagesPerSession);
  std::vector<uint8_t> cpuPages(kv.pageBytes() * 2 * pagesPerSession, 0);
  // Device memory starts undefined; slots no token writes must compare equal below.
  gpu.copyFromHost(gpuPages->data(), cpuPages.data(), cpuPages.size());
  std::vector<int> order(2 * pagesPerSession);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<std::vector<const uint8_t*>> gpuTables(2), cpuTables(2);
  for (int s = 0; s < 2; s++) {
    for (int p = 0; p < pagesPerSession; p++) {
      const size_t off = size_t(order[size_t(s * pagesPerSession + p)]) * kv.pageBytes();
      gpuTables[size_t(s)].push_back(gpuPages->data() + off);
      cpuTables[size_t(s)].push_back(cpuPages.data() + off);
    }
  }
  // Fill each session's KV through kvStore, in two batches.
  const int64_t width = int64_t(kv.kvHeads) * kv.headDim;
  for (int s = 0; s < 2; s++) {
    const int64_t n = lengths[s];
    const auto k = randomFloats(size_t(n * width), seed + 10 + uint32_t(s));
    const auto v = randomFloats(size_t(n * width), seed + 20 + uint32_t(s));
    auto gk = upload(gpu, k);
    auto gv = upload(gpu, v);
    std::vector<KvSlot> gSlots, cSlots;
    for (int64_t t = 0; t < n; t++) {
      gSlots.push_back({const_cast<uint8_t*>(gpuTables[size_t(s)][size_t(t / kv.pageTokens)]), int(t % kv.pageTokens)});
      cSlots.push_back({const_cast<uint8_t*>(cpuTables[size_t(s)][size_t(t / kv.pageTokens)]), int(t % kv.pageTokens)});
    }
    gpu.kvStore(gk.as<float>(), gv.as<float>(), n, gSlots.data(), kv);
    cpu.kvStore(k.data(), v.data(), n, cSlots.data(), kv);
  }
  // The stored pages are the CPU's, byte for byte (fp16 rounding included).
  const auto pagesBack = download<uint8_t>(gpu, *gpuPages, cpuPages.size());
  ASSERT_EQ(0, std::memcmp(pagesBack.data(), cpuPages.data(), cpuPages.size()));

  // Queries: the last 5 positions of session 0 (prefill-like) and the last of session 1.
  std::vector<int32_t> positions = {18, 19, 20, 21, 22, 8};
  std::vector<const uint8_t*const*> gT, cT;
  for (size_t t = 0; t < positions.size(); t++) {
    const size_t s = t < 5 ? 0 : 1;
    gT.push_back(gpuTables[s].data());
    cT.push_back(cpuTables[s].data());
  }
  const auto q = randomFloats(positions.size() * heads * size_t(kv.headDim), seed + 30, 2.0f);
  auto gq = upload(gpu, q);
  auto gout = gpu.allocate(q.size() * 4);
  AttentionBatch b;
  b.tokens = int64_t(positions.size());
  b.heads = heads;
  b.kv = kv;
  b.scale = 0.25f;
  b.positions = positions.data();
  b.pageTables = gT.data();
  gpu.attention(gq.as<float>(), reinterpret_cast<float*>(gout->data()), b);
  std::vector<float> want(q.size());
  b.pageTables = cT.data();
  cpu.attention(q.data(), want.data(), b);
  const auto got = download<float>(gpu, *gout, want.size());
  EXPECT_LT(nmse(got, want), 1e-12);
  for (size_t i = 0; i < want.size(); i++) ASSERT_NEAR(got[i], want[i], 2e-6) << i;
}

TEST_F(VulkanOps, KvStoreAndAttentionOverShuffledFp32PagesMatchTheCpu) {
  checkPagedAttention(*gpu, *cpu, KvPrecision::kF32, freshSeed());
}

TEST_F(VulkanOps, KvStoreAndAttentionOverShuffledFp16PagesMatchTheCpu) {
  checkPagedAttention(*gpu, *cpu, KvPrecision::kF16, freshSeed() + 1);
}

// A long context with few (head, token) workgroups spreads each token's 64-position chunks over
// workgroups and folds them after (attention.comp MODE 1 + 2); with many tokens one workgroup
// per head and token folds as it goes (MODE 0). Same operations in the same order: same bits.
TEST_F(VulkanOps, AttentionChunksSpreadOverWorkgroupsGiveTheBitsOfOneWorkgroupPerToken) {
  LongContext ctx(*gpu, *cpu, KvLayout{16, 2, 64, KvPrecision::kF32}, 300, freshSeed() + 40);
  const int heads = 8;
  const std::vector<int32_t> positions = {ctx.length() - 1, 0, 63, 64, 200};  // 5 x 8 = 40 workgroups
  const auto q = randomFloats(positions.size() * heads * 64, freshSeed() + 42, 0.3f);
  ctx.expectChunkedAndWholeAgree(q, positions, heads, 0.125f, 8);  // 40 x 8 = 320 workgroups
}

TEST_F(VulkanOps, CopiesRoundTripAtAnyOffsetAndSize) {
  for (size_t bytes : {size_t(1), size_t(4099), size_t(3) << 20, size_t(70) << 20}) {
    SCOPED_TRACE(bytes);
    std::vector<uint8_t> host(bytes);
    std::mt19937 rng(freshSeed());
    for (auto& b : host) b = uint8_t(rng());
    auto buffer = gpu->allocate(bytes + 100);
    gpu->copyFromHost(buffer->data() + 37, host.data(), bytes);
    std::vector<uint8_t> back(bytes);
    gpu->copyToHost(back.data(), buffer->data() + 37, bytes);
    ASSERT_EQ(back, host);
  }
}

TEST_F(VulkanOps, AllocationPastTheBudgetIsOverloadedAndForeignPointersAreRefused) {
  vulkan::VulkanDeviceOptions o;
  o.memoryBudget = 1 << 20;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  auto small = vulkan::VulkanDevice::create(o);
  auto a = small->allocate(600 << 10);
  try {
    small->allocate(600 << 10);
    FAIL() << "expected OVERLOADED";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOverloaded);
  }
  a.reset();
  EXPECT_EQ(small->memoryUsed(), 0u);
  auto b = small->allocate(600 << 10);  // freed memory is reusable
  std::vector<float> host(16);
  EXPECT_THROW(small->add(host.data(), host.data(), 16), Error);  // a host pointer, not device memory
  EXPECT_THROW(small->copyToHost(host.data(), reinterpret_cast<const uint8_t*>(host.data()), 64), Error);
  // A range that starts in one buffer and runs on into the next (or past the last) is refused:
  // it would write over a neighbour.
  auto x = small->allocate(1024), y = small->allocate(1024);
  auto* xf = reinterpret_cast<float*>(x->data());
  auto* yf = reinterpret_cast<float*>(y->data());
  small->add(xf, yf, 256);                             // the whole of each: fine
  EXPECT_THROW(small->add(xf, yf, 512), Error);        // 2 KiB from 1 KiB buffers
  EXPECT_THROW(small->add(xf + 128, yf, 256), Error);  // starts inside, ends past
}

}  // namespace
}  // namespace jitllm::testing
