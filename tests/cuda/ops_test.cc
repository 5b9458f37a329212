// Every op of the CUDA device against the CPU device, on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/gpu/integer_product_checks.h"

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
    std::printf("cuda ops: random seed %u (JITLLM_TEST_SEED=%u reproduces)\n", s, s);
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

// Rows padded by `pad` bytes: kernels must honour the stride.
Matrix randomMatrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed, size_t pad = 8) {
  Matrix m{type, rows, cols, 0, {}, {}};
  m.stride = *quant::rowBytes(type, cols) + pad;
  m.bytes.assign(m.stride * size_t(rows), 0xAB);
  m.dequantized.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; r++) {
    const auto row = randomFloats(size_t(cols), seed + uint32_t(r), 1.0f + float(r % 5), float(r % 3) * 0.5f);
    quant::quantizeRow(type, row.data(), m.bytes.data() + size_t(r) * m.stride, cols);
    quant::dequantizeRow(type, m.bytes.data() + size_t(r) * m.stride, m.dequantized.data() + r * cols, cols);
  }
  return m;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    JITLLM_REQUIRE_CUDA();
    gpu = makeCudaDevice();
    cpu = makeCpuDevice();
  }
  std::unique_ptr<cuda::CudaDevice> gpu;
  std::unique_ptr<cpu::CpuDevice> cpu;
};

TEST_F(CudaOps, GetRowsDecodesEveryWeightTypeBitIdenticallyToTheCpu) {
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

TEST_F(CudaOps, GetRowsRejectsTokenIdsOutsideTheTable) {
  const Matrix m = randomMatrix(TensorType::kF32, 4, 32, 1);
  auto table = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
  auto out = gpu->allocate(32 * 4);
  const int32_t bad = 4;
  EXPECT_THROW(
      gpu->getRows(WeightRef{m.type, table->data(), 4, 32, m.stride}, &bad, 1, reinterpret_cast<float*>(out->data())),
      Error);
}

TEST_F(CudaOps, MatmulOfEveryTypeMatchesTheCpuAndATokensResultIsTheSameAloneOrInABatch) {
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
      const bool integer = cuda::cudaIntegerMatmulType(type, cols);
      for (int64_t t = 0; t < tokens; t++) {
        for (int64_t r = 0; r < kRows; r++) {
          double magnitude = withBias ? std::fabs(biasHost[size_t(r)]) : 0.0, rounding = 0;
          for (int64_t k = 0; k < cols; k++) {
            const double w = std::fabs(double(m.dequantized[size_t(r * cols + k)]));
            magnitude += w * std::fabs(xHost[size_t(t * cols + k)]);
            if (integer) {
              // The integer kernels' activations: off by at most s/512, s <= amax/63.5 of the
              // element's block of 32 (quantize_x.cuh).
              float amax = 0;
              for (int64_t i = k / 32 * 32; i < k / 32 * 32 + 32; i++) {
                amax = std::max(amax, std::fabs(xHost[size_t(t * cols + i)]));
              }
              rounding += w * amax / (63.5 * 512);
            }
          }
          ASSERT_NEAR(got[size_t(t * kRows + r)], want[size_t(t * kRows + r)], 2e-6 * magnitude + rounding)
              << "row " << r << " token " << t;
        }
      }
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

// q4_K prefill on tensor cores (matmul_int.cuh's JL_MMA) has the dp4a kernels' bits, which are
// decode's: every token of a batch as computed alone. Rows that end mid-warp and tokens that end
// mid-tile, 32 lane slots (2048), 16 (3072) and fewer units than slots (256), and a bias.
TEST_F(CudaOps, TensorCorePrefillGivesTheBitsOfTheDp4aKernelsAndOfDecode) {
  if (gpu->computeCapability() < 80) GTEST_SKIP() << gpu->info().name << ": int8 mma needs sm_80 or later";
  cuda::CudaDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.tensorCores = false;
  auto dp4a = cuda::CudaDevice::create(o);
  // Both block widths of the tensor-core kernel (tokens > 32 take the wider; 37 tokens: a partial
  // block either way).
  o.tensorCores = true;
  o.tensorCoreTokens = 64;
  auto wideMma = cuda::CudaDevice::create(o);
  o.tensorCoreTokens = 32;
  auto narrowMma = cuda::CudaDevice::create(o);
  // 101 rows: a partial tile of rows; the copy on the GPU ends with the last row (no reads past
  // it). q4_K rows padded to stay 16-byte aligned, which its kernel needs; q6_K rows 2 bytes apart
  // from whole blocks, so their blocks start at either alignment its kernel takes (2 or 4 mod 4),
  // and with 256 columns the last block is 4-byte aligned: its d's word would run past the copy.
  constexpr int64_t kRows = 101;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K})
    for (int64_t cols : {2048, 3072, 256}) {
      const size_t pad = type == TensorType::kQ4_K ? 16 : 2;
      const Matrix m = randomMatrix(type, kRows, cols, freshSeed() + uint32_t(cols) + 7 * uint32_t(type), pad);
      const size_t bytes = m.stride * size_t(kRows - 1) + *quant::rowBytes(type, cols);
      const auto biasHost = randomFloats(size_t(kRows), freshSeed() + 61);
      for (int64_t tokens : {16, 37}) {
        SCOPED_TRACE(std::string(quant::typeName(type)) + ", " + std::to_string(cols) + " columns, " +
                     std::to_string(tokens) + " tokens");
        const auto xHost = randomFloats(size_t(tokens * cols), freshSeed() + uint32_t(tokens), 2.0f);
        const auto product = [&](cuda::CudaDevice& dev, int64_t first, int64_t n) {
          auto w = dev.adoptHostBytes(m.bytes.data(), bytes);
          auto x = upload(dev, xHost);
          auto bias = upload(dev, biasHost);
          auto y = dev.allocate(size_t(n * kRows) * 4);
          dev.matmul(WeightRef{type, w->data(), kRows, cols, m.stride}, x.as<float>() + first * cols, n,
                     reinterpret_cast<float*>(y->data()), bias.as<float>());
          return download<float>(dev, *y, size_t(n * kRows));
        };
        const uint64_t before = gpu->tensorCoreProducts();
        const auto mma = product(*gpu, 0, tokens);
        ASSERT_EQ(before + 1, gpu->tensorCoreProducts()) << "the tensor-core kernel did not run";
        const auto want = product(*dp4a, 0, tokens);
        ASSERT_EQ(0u, dp4a->tensorCoreProducts());
        EXPECT_EQ(0, std::memcmp(mma.data(), want.data(), want.size() * 4));
        for (cuda::CudaDevice* other : {wideMma.get(), narrowMma.get()}) {
          const uint64_t otherBefore = other->tensorCoreProducts();
          const auto same = product(*other, 0, tokens);
          ASSERT_EQ(otherBefore + 1, other->tensorCoreProducts());
          EXPECT_EQ(0, std::memcmp(same.data(), want.data(), want.size() * 4))
              << (other == wideMma.get() ? "64" : "32") << " tokens a block";
        }
        for (int64_t t : {int64_t(0), int64_t(9), tokens - 1}) {
          const auto alone = product(*gpu, t, 1);
          EXPECT_EQ(0, std::memcmp(alone.data(), mma.data() + t * kRows, size_t(kRows) * 4)) << "token " << t;
        }
      }
    }
}

// q, k and v read one input and the integer kernels quantize it once; anything that may write
// that input in between - an op, a copy, the product's own output - must make the next product
// quantize it again. No synchronisation between the steps, as in a real step's queue.
TEST_F(CudaOps, AnInputWrittenBetweenIntegerProductsIsQuantizedAgain) {
  constexpr int64_t kRows = 64, kCols = 512;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(quant::typeName(type)));
    ASSERT_TRUE(cuda::cudaIntegerMatmulType(type, kCols));
    const Matrix m = randomMatrix(type, kRows, kCols, freshSeed() + 11 * uint32_t(type));
    auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef gw{type, w->data(), kRows, kCols, m.stride};
    const Matrix sq = randomMatrix(type, kCols, kCols, freshSeed() + 5);
    auto ws = gpu->adoptHostBytes(sq.bytes.data(), sq.bytes.size());
    expectWrittenInputsQuantizedAgain(*gpu, gw, WeightRef{type, ws->data(), kCols, kCols, sq.stride}, freshSeed());
  }
}

// rms_norm (also fused with the residual add before it) and swiglu write the integer form of their
// output themselves when an integer product reads it next; the product's result is bit for bit
// what quantize_x's form gives.
TEST_F(CudaOps, ProducersFusedWithTheQuantizationGiveTheSameBitsAsQuantizingAfter) {
  constexpr int64_t kRows = 96, kCols = 512, kTokens = 3;
  const Matrix m = randomMatrix(TensorType::kQ4_K, kRows, kCols, freshSeed() + 21);
  auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
  const WeightRef gw{TensorType::kQ4_K, w->data(), kRows, kCols, m.stride};
  auto x = upload(*gpu, randomFloats(size_t(kTokens * kCols), freshSeed() + 22, 3.0f));
  auto u = upload(*gpu, randomFloats(size_t(kTokens * kCols), freshSeed() + 23));
  auto norm = upload(*gpu, randomFloats(size_t(kCols), freshSeed() + 24, 0.2f, 1.0f));
  auto out = gpu->allocate(size_t(kTokens * kCols) * 4);
  auto y = gpu->allocate(size_t(2 * kTokens * kRows) * 4);
  auto* o = reinterpret_cast<float*>(out->data());
  auto* ys = reinterpret_cast<float*>(y->data());
  // The same product on a copy of `out`, which only quantize_x can quantize.
  const auto separately = [&] {
    auto copy = upload(*gpu, download<float>(*gpu, *out, size_t(kTokens * kCols)));
    const uint64_t before = gpu->separateQuantizations();
    gpu->matmul(gw, copy.as<float>(), kTokens, ys, nullptr);
    EXPECT_EQ(before + 1, gpu->separateQuantizations());
    return download<float>(*gpu, *y, size_t(kTokens * kRows));
  };
  // The first integer product of a shape grows the device's scratch, which runs the queue (no
  // fusion then): a real step's first product is a prefill's.
  gpu->matmul(gw, x.as<float>(), kTokens, ys, nullptr);
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "swiglu" : "add + rmsNorm");
    if (swiglu) {
      gpu->swiglu(x.as<float>(), u.as<float>(), o, kTokens * kCols);
    } else {
      // The residual add and the norm after it run as one kernel: x is updated all the same, and
      // the norm is of the sum.
      const auto x0 = download<float>(*gpu, *x.buffer, size_t(kTokens * kCols));
      const auto u0 = download<float>(*gpu, *u.buffer, size_t(kTokens * kCols));
      const uint64_t adds = gpu->fusedAdds();
      gpu->add(x.as<float>(), u.as<float>(), kTokens * kCols);
      gpu->rmsNorm(x.as<float>(), norm.as<float>(), o, kTokens, kCols, 1e-5f);
      EXPECT_EQ(adds + 1, gpu->fusedAdds());
      {
        std::vector<float> sum(x0.size());
        for (size_t i = 0; i < sum.size(); i++) sum[i] = x0[i] + u0[i];
        auto unfused = upload(*gpu, sum);
        auto normed = gpu->allocate(sum.size() * 4);
        gpu->rmsNorm(unfused.as<float>(), norm.as<float>(), reinterpret_cast<float*>(normed->data()), kTokens, kCols,
                     1e-5f);
        const auto wantNorm = download<float>(*gpu, *normed, sum.size());
        EXPECT_EQ(0, std::memcmp(download<float>(*gpu, *x.buffer, sum.size()).data(), sum.data(), sum.size() * 4));
        EXPECT_EQ(0, std::memcmp(download<float>(*gpu, *out, sum.size()).data(), wantNorm.data(), sum.size() * 4));
      }  // (freeing a buffer runs the queue: before the fusions below, not between them)
      // Again, now with the product after it.
      gpu->add(x.as<float>(), u.as<float>(), kTokens * kCols);
      gpu->rmsNorm(x.as<float>(), norm.as<float>(), o, kTokens, kCols, 1e-5f);
      EXPECT_EQ(adds + 2, gpu->fusedAdds());
    }
    const uint64_t fused = gpu->fusedQuantizations(), separate = gpu->separateQuantizations();
    gpu->matmul(gw, o, kTokens, ys, nullptr);
    gpu->matmul(gw, o, kTokens, ys + kTokens * kRows, nullptr);  // q, k, v: one quantization
    EXPECT_EQ(fused + 1, gpu->fusedQuantizations());
    EXPECT_EQ(separate, gpu->separateQuantizations());
    const auto got = download<float>(*gpu, *y, size_t(2 * kTokens * kRows));
    const auto want = separately();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
    EXPECT_EQ(0, std::memcmp(got.data() + want.size(), want.data(), want.size() * 4));
  }
}

// A layer's q, k and v (v in q6_K, as Q4_K_M files have it in some layers; biases as qwen2 has)
// and its gate and up, through matmuls(): one launch in decode shapes, and the bits of the
// products run one by one - in any batch, also the prefill batches that are not grouped.
TEST_F(CudaOps, GroupedProductsGiveTheBitsOfSeparateOnesInOneLaunch) {
  constexpr int64_t kCols = 512;
  const Matrix mq = randomMatrix(TensorType::kQ4_K, 96, kCols, freshSeed() + 31);
  const Matrix mk = randomMatrix(TensorType::kQ4_K, 40, kCols, freshSeed() + 32);
  const Matrix mv = randomMatrix(TensorType::kQ6_K, 40, kCols, freshSeed() + 33);
  const Matrix mu = randomMatrix(TensorType::kQ4_K, 4100, kCols, freshSeed() + 34);  // tall: 2 rows per warp
  std::vector<std::unique_ptr<DeviceBuffer>> weights;
  const auto ref = [&](const Matrix& m) {
    weights.push_back(gpu->adoptHostBytes(m.bytes.data(), m.bytes.size()));
    return WeightRef{m.type, weights.back()->data(), m.rows, m.cols, m.stride};
  };
  const WeightRef q = ref(mq), k = ref(mk), v = ref(mv), up = ref(mu);
  auto bias = upload(*gpu, randomFloats(96 + 40 + 40, freshSeed() + 35));
  const float* bq = bias.as<float>();
  for (int64_t tokens : {1, 3, 12}) {
    SCOPED_TRACE(tokens);
    const auto xHost = randomFloats(size_t(tokens * kCols), freshSeed() + 36 + uint32_t(tokens), 2.0f);
    auto x = upload(*gpu, xHost);
    for (int group = 0; group < 2; group++) {
      const std::vector<WeightRef> ws = group == 0 ? std::vector{q, k, v} : std::vector{up, k};
      const std::vector<const float*> biases =
          group == 0 ? std::vector{bq, bq + 96, bq + 136} : std::vector<const float*>{nullptr, nullptr};
      std::vector<std::unique_ptr<DeviceBuffer>> together, alone;
      std::vector<MatmulTarget> targets;
      for (size_t i = 0; i < ws.size(); i++) {
        together.push_back(gpu->allocate(size_t(tokens * ws[i].rows) * 4));
        alone.push_back(gpu->allocate(size_t(tokens * ws[i].rows) * 4));
        targets.push_back({ws[i], reinterpret_cast<float*>(together.back()->data()), biases[i]});
      }
      const uint64_t grouped = gpu->groupedProducts();
      gpu->matmuls(targets, x.as<float>(), tokens);
      EXPECT_EQ(grouped + (tokens <= 8 ? 1 : 0), gpu->groupedProducts());
      for (size_t i = 0; i < ws.size(); i++) {
        gpu->matmul(ws[i], x.as<float>(), tokens, reinterpret_cast<float*>(alone[i]->data()), biases[i]);
      }
      for (size_t i = 0; i < ws.size(); i++) {
        SCOPED_TRACE(i);
        const size_t n = size_t(tokens * ws[i].rows);
        const auto got = download<float>(*gpu, *together[i], n);
        const auto want = download<float>(*gpu, *alone[i], n);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * 4));
      }
    }
  }
}

// rope of q and k and kvStore of k and v in one launch: the CPU's rotated q and k and its pages,
// bit for bit, in fp32 and fp16 pages, adjacent-pair and neox rotation, a partial rotation.
TEST_F(CudaOps, RopeAndStoreIsRopeThenKvStoreInOneLaunch) {
  const int heads = 6, kvHeads = 2, headDim = 32;
  const std::vector<int32_t> positions = {3, 0, 17, 130, 4095};
  const int64_t tokens = int64_t(positions.size());
  for (KvPrecision precision : {KvPrecision::kF32, KvPrecision::kF16}) {
    for (const RopeParams& params :
         {RopeParams{32, 10000.0f, 1.0f, nullptr, false}, RopeParams{16, 1000000.0f, 0.5f, nullptr, true}}) {
      SCOPED_TRACE(std::string(precision == KvPrecision::kF16 ? "fp16" : "fp32") + (params.neox ? " neox" : ""));
      const KvLayout kv{4, kvHeads, headDim, precision};
      const int64_t width = int64_t(kvHeads) * headDim;
      const auto qHost = randomFloats(size_t(tokens * heads * headDim), freshSeed() + 41);
      const auto kHost = randomFloats(size_t(tokens * width), freshSeed() + 42);
      const auto vHost = randomFloats(size_t(tokens * width), freshSeed() + 43);
      auto q = upload(*gpu, qHost);
      auto k = upload(*gpu, kHost);
      auto v = upload(*gpu, vHost);
      std::vector<uint8_t> cpuPages(3 * kv.pageBytes(), 0);
      auto gpuPages = gpu->allocate(cpuPages.size());
      gpu->copyFromHost(gpuPages->data(), cpuPages.data(), cpuPages.size());
      std::vector<KvSlot> gSlots, cSlots;
      for (int64_t t = 0; t < tokens; t++) {  // pages out of order, slots scattered
        const size_t page = size_t(2 - t % 3) * kv.pageBytes();
        const int slot = int((t * 3) % kv.pageTokens);
        gSlots.push_back({gpuPages->data() + page, slot});
        cSlots.push_back({cpuPages.data() + page, slot});
      }
      gpu->ropeAndStore(q.as<float>(), k.as<float>(), v.as<float>(), tokens, heads, kvHeads, positions.data(), params,
                        gSlots.data(), kv);
      std::vector<float> wantQ = qHost, wantK = kHost;
      cpu->ropeAndStore(wantQ.data(), wantK.data(), vHost.data(), tokens, heads, kvHeads, positions.data(), params,
                        cSlots.data(), kv);
      EXPECT_EQ(0, std::memcmp(download<float>(*gpu, *q.buffer, wantQ.size()).data(), wantQ.data(), wantQ.size() * 4));
      EXPECT_EQ(0, std::memcmp(download<float>(*gpu, *k.buffer, wantK.size()).data(), wantK.data(), wantK.size() * 4));
      EXPECT_EQ(
          0, std::memcmp(download<uint8_t>(*gpu, *gpuPages, cpuPages.size()).data(), cpuPages.data(), cpuPages.size()));
    }
  }
}

// A migration's KV pages: scattered blocks gathered into host memory as one transfer and scattered
// back, in 16-byte moves (aligned blocks) and bytewise (an odd size), more bytes than the two
// 8 MiB pinned buffers hold, and a block that is not this device's refused before anything moves.
TEST_F(CudaOps, GatherAndScatterMoveScatteredBlocksInOneTransfer) {
  for (size_t blockBytes : {size_t(1) << 20, size_t(4099)}) {
    SCOPED_TRACE(blockBytes);
    constexpr size_t kPool = 24, kCount = 20;
    auto pool = gpu->allocate(kPool * blockBytes);
    std::vector<uint8_t> host(kPool * blockBytes);
    std::mt19937 rng(freshSeed() + uint32_t(blockBytes));
    for (auto& b : host) b = uint8_t(rng());
    gpu->copyFromHost(pool->data(), host.data(), host.size());
    std::vector<size_t> order(kPool);
    std::iota(order.begin(), order.end(), size_t(0));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<const uint8_t*> from;
    for (size_t i = 0; i < kCount; i++) from.push_back(pool->data() + order[i] * blockBytes);
    std::vector<uint8_t> gathered(kCount * blockBytes);
    gpu->gatherToHost(gathered.data(), from.data(), kCount, blockBytes);
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
    gpu->scatterFromHost(to.data(), fresh.data(), kCount, blockBytes);
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*gpu, *pool, want.size()).data(), want.data(), want.size()));
    const std::vector<const uint8_t*> foreign = {from[0], host.data()};
    EXPECT_THROW(gpu->gatherToHost(gathered.data(), foreign.data(), 2, blockBytes), Error);
    std::vector<uint8_t*> foreignTo = {to[0], host.data()};
    EXPECT_THROW(gpu->scatterFromHost(foreignTo.data(), fresh.data(), 2, blockBytes), Error);
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*gpu, *pool, want.size()).data(), want.data(), want.size()));
  }
}

// A migration's pages between two CUDA devices: gathered on the source, one peer copy, scattered
// on the target - the second GPU when there is one, else a second device on this GPU (the same
// kernels and copy, within one context). Anything else (the CPU as target) is left to the host
// path: moveBlocksTo says false and touches nothing.
TEST_F(CudaOps, BlocksMoveBetweenCudaDevicesInOneGatherPeerCopyAndScatter) {
  auto other = makeCudaDevice(cuda::CudaDevice::count() > 1 ? 1 : 0);
  std::printf("target: %s (%s)\n", other->info().id.str().c_str(), other->info().name.c_str());
  for (size_t blockBytes : {size_t(1) << 20, size_t(4099)}) {
    SCOPED_TRACE(blockBytes);
    constexpr size_t kPool = 24, kCount = 20;
    std::mt19937 rng(freshSeed() + uint32_t(blockBytes));
    const auto randomBytes = [&](size_t n) {
      std::vector<uint8_t> v(n);
      for (auto& b : v) b = uint8_t(rng());
      return v;
    };
    const auto sourceHost = randomBytes(kPool * blockBytes), targetHost = randomBytes(kPool * blockBytes);
    auto source = gpu->adoptHostBytes(sourceHost.data(), sourceHost.size());
    auto target = other->adoptHostBytes(targetHost.data(), targetHost.size());
    std::vector<size_t> order(kPool);
    std::iota(order.begin(), order.end(), size_t(0));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<const uint8_t*> from;
    std::vector<uint8_t*> to;
    std::vector<uint8_t> want = targetHost;
    for (size_t i = 0; i < kCount; i++) {
      from.push_back(source->data() + order[i] * blockBytes);
      to.push_back(target->data() + order[kPool - 1 - i] * blockBytes);
      std::memcpy(want.data() + order[kPool - 1 - i] * blockBytes, sourceHost.data() + order[i] * blockBytes,
                  blockBytes);
    }
    const uint64_t before = gpu->peerBlockMoves();
    ASSERT_TRUE(gpu->moveBlocksTo(*other, from.data(), to.data(), kCount, blockBytes));
    EXPECT_EQ(before + 1, gpu->peerBlockMoves());
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*other, *target, want.size()).data(), want.data(), want.size()));
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*gpu, *source, sourceHost.size()).data(), sourceHost.data(),
                             sourceHost.size()))
        << "the source is only read";
    // Blocks that are not the target's are refused before anything moves.
    std::vector<uint8_t*> foreign = {to[0], source->data()};
    EXPECT_THROW(gpu->moveBlocksTo(*other, from.data(), foreign.data(), 2, blockBytes), Error);
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*other, *target, want.size()).data(), want.data(), want.size()));
  }
  // Whole buffers device to device too (copyToDevice), and the CPU is not a peer.
  const auto bytes = randomFloats(1000, freshSeed() + 3);
  auto a = upload(*gpu, bytes);
  auto b = other->allocate(bytes.size() * 4);
  gpu->copyToDevice(*other, b->data(), a.buffer->data(), bytes.size() * 4);
  EXPECT_EQ(bytes, download<float>(*other, *b, bytes.size()));
  const uint8_t* one[] = {a.buffer->data()};
  uint8_t* hostBlock[] = {reinterpret_cast<uint8_t*>(const_cast<float*>(bytes.data()))};
  EXPECT_FALSE(gpu->moveBlocksTo(*cpu, one, hostBlock, 1, 64));
  // Within one device: blocks 0 and 1 of a buffer onto 3 and 2.
  const uint8_t* within[] = {a.buffer->data(), a.buffer->data() + 256};
  uint8_t* onto[] = {a.buffer->data() + 3 * 256, a.buffer->data() + 2 * 256};
  ASSERT_TRUE(gpu->moveBlocksTo(*gpu, within, onto, 2, 256));
  const auto moved = download<uint8_t>(*gpu, *a.buffer, 4 * 256);
  const auto* original = reinterpret_cast<const uint8_t*>(bytes.data());
  EXPECT_EQ(0, std::memcmp(moved.data() + 3 * 256, original, 256));
  EXPECT_EQ(0, std::memcmp(moved.data() + 2 * 256, original + 256, 256));
  EXPECT_EQ(0, std::memcmp(moved.data(), original, 2 * 256));
}

TEST_F(CudaOps, RmsNormMatchesTheCpu) {
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

TEST_F(CudaOps, RopeIsBitIdenticalToTheCpuInEveryVariant) {
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

TEST_F(CudaOps, SwigluAndAddMatchTheCpu) {
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
  for (size_t i = 0; i < want.size(); i++) ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << i;

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

TEST_F(CudaOps, KvStoreAndAttentionOverShuffledFp32PagesMatchTheCpu) {
  checkPagedAttention(*gpu, *cpu, KvPrecision::kF32, freshSeed());
}

TEST_F(CudaOps, KvStoreAndAttentionOverShuffledFp16PagesMatchTheCpu) {
  checkPagedAttention(*gpu, *cpu, KvPrecision::kF16, freshSeed() + 1);
}

TEST_F(CudaOps, CopiesRoundTripAtAnyOffsetAndSize) {
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

TEST_F(CudaOps, AllocationPastTheBudgetIsOverloadedAndForeignPointersAreRefused) {
  cuda::CudaDeviceOptions o;
  o.memoryBudget = 1 << 20;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  auto small = cuda::CudaDevice::create(o);
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
}

}  // namespace
}  // namespace jitllm::testing
