#include "kernels/cpu/gemm/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/gemm/packed_rows.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"

namespace jitllm::cpu {
namespace {

using quant::TensorType;

constexpr TensorType kComputable[] = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
    TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
};

std::vector<Isa> isasHere() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (isaSupported(isa)) out.push_back(isa);
  }
  return out;
}

// A quantized rows x cols matrix with padded rows, and its exact dequantized values.
struct Matrix {
  TensorType type;
  int64_t rows, cols;
  size_t stride;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // rows x cols

  WeightView view() const { return WeightView{type, bytes.data(), rows, cols, stride}; }
};

Matrix randomMatrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m{type, rows, cols, 0, {}, {}};
  // 6 spare bytes per row: the kernels must honour rowStride, not assume packed rows.
  m.stride = *quant::rowBytes(type, cols) + 6;
  m.bytes.assign(m.stride * size_t(rows), 0xAB);
  m.dequantized.resize(size_t(rows * cols));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; r++) {
    // Rows with different offsets and scales, so that mins and sub-block scales matter.
    const float offset = float(r % 3) * 0.5f, scale = 1.0f + float(r % 5);
    for (float& v : row) v = dist(rng) * scale + offset;
    quant::quantizeRow(type, row.data(), m.bytes.data() + size_t(r) * m.stride, cols);
    quant::dequantizeRow(type, m.bytes.data() + size_t(r) * m.stride, m.dequantized.data() + r * cols, cols);
  }
  return m;
}

std::vector<float> randomActivations(int64_t tokens, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(tokens * stride));
  for (float& v : x) v = dist(rng);
  return x;
}

// The types the integer kernels multiply with int8-pair activations (about 15 bits) instead of
// floats: every Isa but the scalar and the plain AVX-512 one.
bool usesIntegerActivations(TensorType type, Isa isa) {
  if (isa != Isa::kScalar && type == TensorType::kQ5_0) return true;  // no float kernel: kAvx512 too
  return isa != Isa::kScalar && isa != Isa::kAvx512 &&
         (type == TensorType::kQ4_0 || type == TensorType::kQ4_K || type == TensorType::kQ5_K ||
          type == TensorType::kQ6_K || type == TensorType::kQ8_0);
}

// BF16 weights on vdpbf16ps (kAvx512Bf16, and kAvx512Amx which takes its kernels): activations as
// two bf16 halves, within 2^-16 of each value.
bool usesSplitBf16Activations(TensorType type, Isa isa) {
  return type == TensorType::kBF16 && (isa == Isa::kAvx512Bf16 || isa == Isa::kAvx512Amx);
}

std::string describe(TensorType type, Isa isa, int64_t tokens) {
  return std::string(quant::typeName(type)) + " on " + isaName(isa) + " with " + std::to_string(tokens) + " tokens";
}

// Columns per type: two K-quant super-blocks; 15 blocks of 32 (q8_0's integer kernels take 8
// blocks at a time, so rows end in a partial unit of an odd block count); an odd count for the
// float types so that their rows end in a partial vector.
int64_t colsFor(TensorType type) {
  const int64_t block = quant::typeTraits(type).blockElems;
  return block == 1 ? 517 : block == 32 ? 480 : 512;
}

TEST(Matmul, EveryTypeOnEveryIsaMatchesAFloat64ReferenceOverTheDequantizedWeights) {
  constexpr int64_t kRows = 37;
  for (TensorType type : kComputable) {
    const int64_t cols = colsFor(type);
    const Matrix m = randomMatrix(type, kRows, cols, 100 + uint32_t(type));
    for (Isa isa : isasHere()) {
      for (int64_t tokens : {1, 3, 17}) {
        SCOPED_TRACE(describe(type, isa, tokens));
        const int64_t xStride = cols + 3, yStride = kRows + 5;
        const std::vector<float> x = randomActivations(tokens, xStride, 7 * uint32_t(tokens));
        std::vector<float> y(size_t(tokens * yStride), NAN);
        // Odd row ranges, as threads would split them.
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 22}, {22, 23}, {23, 37}}) {
          matmulRows(m.view(), x.data(), xStride, tokens, y.data(), yStride, begin, end, isa);
        }
        for (int64_t t = 0; t < tokens; t++) {
          for (int64_t r = 0; r < kRows; r++) {
            double exact = 0, magnitude = 0;
            for (int64_t k = 0; k < cols; k++) {
              const double p = double(m.dequantized[size_t(r * cols + k)]) * x[size_t(t * xStride + k)];
              exact += p;
              magnitude += std::fabs(p);
            }
            // float32 accumulation over at most cols/lanes terms per lane plus the lane tree.
            double tolerance = 2e-6 * magnitude;
            if (usesSplitBf16Activations(type, isa)) tolerance += std::ldexp(magnitude, -16);
            if (usesIntegerActivations(type, isa)) {
              // Plus the activations' rounding: at most s/512 per element, s <= amax/63.5 of its
              // block of 32 (see matmul_avx512vnni.cc).
              for (int64_t k = 0; k < cols; k++) {
                float amax = 0;
                for (int64_t i = k / 32 * 32; i < k / 32 * 32 + 32; i++) {
                  amax = std::max(amax, std::fabs(x[size_t(t * xStride + i)]));
                }
                tolerance += std::fabs(double(m.dequantized[size_t(r * cols + k)])) * amax / (63.5 * 512);
              }
            }
            ASSERT_NEAR(y[size_t(t * yStride + r)], exact, tolerance) << "row " << r << " token " << t;
          }
          // Outside the rows of y nothing was written.
          for (int64_t r = kRows; r < yStride; r++) ASSERT_TRUE(std::isnan(y[size_t(t * yStride + r)]));
        }
      }
    }
  }
}

// With one-hot activations every product but one is an exact zero, so y is the weight itself:
// this proves each Isa's decoder reproduces quant::dequantizeRow bit for bit, in both the decode
// path (one token) and the tiled path (many tokens).
TEST(Matmul, OneHotActivationsReturnTheDequantizedWeightsExactlyOnEveryIsa) {
  constexpr int64_t kRows = 9;
  for (TensorType type : kComputable) {
    const int64_t cols = colsFor(type);
    const Matrix m = randomMatrix(type, kRows, cols, 300 + uint32_t(type));
    std::vector<float> identity(size_t(cols * cols), 0.0f);
    for (int64_t k = 0; k < cols; k++) identity[size_t(k * cols + k)] = 1.0f;
    for (Isa isa : isasHere()) {
      SCOPED_TRACE(describe(type, isa, cols));
      std::vector<float> y(size_t(cols * kRows), NAN);
      matmulRows(m.view(), identity.data(), cols, cols, y.data(), kRows, 0, kRows, isa);
      for (int64_t k = 0; k < cols; k++) {
        for (int64_t r = 0; r < kRows; r++) {
          ASSERT_EQ(y[size_t(k * kRows + r)], m.dequantized[size_t(r * cols + k)]) << "row " << r << " column " << k;
        }
      }
      for (int64_t k : {int64_t(0), int64_t(31), int64_t(200), cols - 1}) {
        std::vector<float> y1(kRows, NAN);
        matmulRows(m.view(), identity.data() + k * cols, cols, 1, y1.data(), kRows, 0, kRows, isa);
        for (int64_t r = 0; r < kRows; r++) {
          ASSERT_EQ(y1[size_t(r)], m.dequantized[size_t(r * cols + k)]) << "decode, column " << k;
        }
      }
    }
  }
}

bool bitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Matmul, ResultsAreBitwiseIdenticalHoweverRowsAreSplitAndHoweverTokensAreBatched) {
  constexpr int64_t kRows = 45, kTokens = 17;
  for (TensorType type : kComputable) {
    const int64_t cols = colsFor(type);
    const Matrix m = randomMatrix(type, kRows, cols, 500 + uint32_t(type));
    const std::vector<float> x = randomActivations(kTokens, cols, 77);
    for (Isa isa : isasHere()) {
      SCOPED_TRACE(describe(type, isa, kTokens));
      std::vector<float> whole(size_t(kTokens * kRows), NAN);
      matmulRows(m.view(), x.data(), cols, kTokens, whole.data(), kRows, 0, kRows, isa);

      std::vector<float> split(whole.size(), NAN);
      for (int64_t begin = 0; begin < kRows;) {
        const int64_t end = std::min<int64_t>(kRows, begin + 1 + begin % 6);  // 1, 2, 3, ... rows
        matmulRows(m.view(), x.data(), cols, kTokens, split.data(), kRows, begin, end, isa);
        begin = end;
      }
      EXPECT_TRUE(bitwiseEqual(whole, split)) << "row splitting changed the result";

      // Token by token (the decode path) and in uneven batches give the same bits as all at once.
      std::vector<float> single(whole.size(), NAN);
      for (int64_t t = 0; t < kTokens; t++) {
        matmulRows(m.view(), x.data() + t * cols, cols, 1, single.data() + t * kRows, kRows, 0, kRows, isa);
      }
      EXPECT_TRUE(bitwiseEqual(whole, single)) << "decoding one token differs from the batch";
      std::vector<float> batches(whole.size(), NAN);
      for (int64_t t = 0; t < kTokens;) {
        const int64_t n = std::min<int64_t>(kTokens - t, 2 + t % 5);
        matmulRows(m.view(), x.data() + t * cols, cols, n, batches.data() + t * kRows, kRows, 0, kRows, isa);
        t += n;
      }
      EXPECT_TRUE(bitwiseEqual(whole, batches)) << "batch composition changed the result";
      // Rows streamed from memory (WeightView::streamed: decode takes them one at a time) give
      // the same bits, token by token and in a batch.
      // So do the tuned prefetch distances (WeightView::prefetchBytes: one line to past the rows),
      // and on AVX-512 VNNI the 256-bit kernels (WeightView::narrowInt8; q8_0's 480 columns end in
      // a partial unit there too).
      WeightView streamed = m.view();
      streamed.streamed = true;
      streamed.prefetchBytes = size_t(64) << (uint32_t(type) % 9);
      streamed.narrowInt8 = true;
      std::vector<float> streamedSingle(whole.size(), NAN), streamedWhole(whole.size(), NAN);
      for (int64_t t = 0; t < kTokens; t++) {
        matmulRows(streamed, x.data() + t * cols, cols, 1, streamedSingle.data() + t * kRows, kRows, 0, kRows, isa);
      }
      matmulRows(streamed, x.data(), cols, kTokens, streamedWhole.data(), kRows, 0, kRows, isa);
      EXPECT_TRUE(bitwiseEqual(whole, streamedSingle)) << "streamed decode differs";
      EXPECT_TRUE(bitwiseEqual(whole, streamedWhole)) << "streamed batch differs";
      for (float v : whole) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

// The AMX prefill and the VNNI kernels compute the same contract (matmul_int8.inc): every
// (row, token) result has the same bits on either, for every row count, token count and q8_0 tail
// length, including rows and tokens that fill only part of a 16 x 16 tile.
TEST(Matmul, AmxPrefillGivesTheBitsOfTheVnniKernels) {
  if (!isaSupported(Isa::kAvx512Amx)) {
    GTEST_SKIP() << "this CPU (or OS) has no usable AMX-INT8; nothing to compare";
  }
  struct Shape {
    TensorType type;
    int64_t rows, cols, tokens;
  };
  const Shape shapes[] = {
      {TensorType::kQ4_K, 37, 512, 17}, {TensorType::kQ4_K, 16, 2304, 64}, {TensorType::kQ4_K, 5, 256, 8},
      {TensorType::kQ6_K, 33, 768, 23}, {TensorType::kQ6_K, 16, 256, 16},  {TensorType::kQ8_0, 19, 32, 9},
      {TensorType::kQ8_0, 21, 224, 40}, {TensorType::kQ8_0, 16, 288, 16},  {TensorType::kQ8_0, 3, 1056, 70},
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE(describe(s.type, Isa::kAvx512Amx, s.tokens) + ", " + std::to_string(s.rows) + " x " +
                 std::to_string(s.cols));
    const Matrix m = randomMatrix(s.type, s.rows, s.cols, 900 + uint32_t(s.cols));
    const int64_t xStride = s.cols + 5;
    std::vector<float> x = randomActivations(s.tokens, xStride, 31 + uint32_t(s.rows));
    // Blocks of very different magnitudes, and an all-zero block, exercise the per-block scales.
    for (int64_t k = 0; k < 32; k++) x[size_t(k)] = 0.0f;
    for (int64_t k = 32; k < std::min<int64_t>(64, s.cols); k++) x[size_t(xStride + k)] *= 1e-6f;
    std::vector<float> amx(size_t(s.tokens * s.rows), NAN), vnni(amx.size(), NAN);
    matmulRows(m.view(), x.data(), xStride, s.tokens, amx.data(), s.rows, 0, s.rows, Isa::kAvx512Amx);
    matmulRows(m.view(), x.data(), xStride, s.tokens, vnni.data(), s.rows, 0, s.rows, Isa::kAvx512Vnni);
    ASSERT_TRUE(bitwiseEqual(amx, vnni)) << "the AMX prefill differs from the VNNI kernels";
    // And from decode, one token at a time on AMX's Isa (which runs the VNNI decode).
    std::vector<float> one(size_t(s.rows), NAN);
    for (int64_t t = 0; t < s.tokens; t += 7) {
      matmulRows(m.view(), x.data() + t * xStride, xStride, 1, one.data(), s.rows, 0, s.rows, Isa::kAvx512Amx);
      ASSERT_EQ(std::memcmp(one.data(), amx.data() + t * s.rows, one.size() * sizeof(float)), 0) << "token " << t;
    }
    // Row ranges that start and end inside tiles.
    std::vector<float> split(amx.size(), NAN);
    for (int64_t begin = 0; begin < s.rows;) {
      const int64_t end = std::min<int64_t>(s.rows, begin + 3 + 5 * (begin % 4));
      matmulRows(m.view(), x.data(), xStride, s.tokens, split.data(), s.rows, begin, end, Isa::kAvx512Amx);
      begin = end;
    }
    ASSERT_TRUE(bitwiseEqual(amx, split)) << "row splitting changed the AMX result";
    // Activations laid out once, in two tile ranges, and read by several row ranges.
    PreparedActivations prepared;
    ASSERT_TRUE(PreparedActivations::wanted(Isa::kAvx512Amx, s.type, s.tokens));
    const int64_t tiles = prepared.reset(s.tokens, s.cols);
    prepared.layOut(x.data(), xStride, 0, tiles / 2);
    prepared.layOut(x.data(), xStride, tiles / 2, tiles);
    std::vector<float> fromPrepared(amx.size(), NAN);
    matmulRowsPrepared(m.view(), prepared, fromPrepared.data(), s.rows, 0, s.rows / 2, Isa::kAvx512Amx);
    matmulRowsPrepared(m.view(), prepared, fromPrepared.data(), s.rows, s.rows / 2, s.rows, Isa::kAvx512Amx);
    ASSERT_TRUE(bitwiseEqual(amx, fromPrepared)) << "prepared activations changed the result";
  }
}

// A non-finite activation reaches every result of its token, on every path, as in the float
// kernels.
TEST(Matmul, NonFiniteActivationsPropagateThroughTheIntegerKernels) {
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ8_0}) {
    const Matrix m = randomMatrix(type, 17, 512, 1200 + uint32_t(type));
    for (Isa isa : isasHere()) {
      for (int64_t tokens : {1, 20}) {
        SCOPED_TRACE(describe(type, isa, tokens));
        // Infinity, and NaN at every place of a 32-column block: a max over the block that
        // drops NaN (maxps returns its second operand then) would quantize it as a finite value.
        for (const auto& [column, bad] : {std::pair{300, INFINITY}, std::pair{288, NAN}, std::pair{300, NAN},
                                          std::pair{303, NAN}, std::pair{319, NAN}, std::pair{511, -NAN}}) {
          SCOPED_TRACE(std::to_string(bad) + " at column " + std::to_string(column));
          std::vector<float> x = randomActivations(tokens, 512, 5);
          x[size_t(column)] = bad;  // token 0
          std::vector<float> y(size_t(tokens * 17), 0.0f);
          matmulRows(m.view(), x.data(), 512, tokens, y.data(), 17, 0, 17, isa);
          for (int64_t r = 0; r < 17; r++) {
            ASSERT_FALSE(std::isfinite(y[size_t(r)])) << "row " << r;
            if (std::isnan(bad)) {
              ASSERT_TRUE(std::isnan(y[size_t(r)])) << "row " << r;
            }
          }
          for (int64_t t = 1; t < tokens; t++) ASSERT_TRUE(std::isfinite(y[size_t(t * 17)])) << "token " << t;
        }
      }
    }
  }
}

// kAvx512Bf16 runs its own kernel for BF16 weights (not the float one: some bits differ), keeps
// about 16 bits of every activation (one bf16 half alone would keep 8: its error is 2^8 times
// larger), and turns an infinite activation into an infinite result, not inf - inf.
TEST(Matmul, Bf16WeightsOnVdpbf16psSplitEachActivationInTwoHalves) {
  if (!isaSupported(Isa::kAvx512Bf16)) GTEST_SKIP() << "this CPU has no AVX-512 BF16: the vdpbf16ps path cannot run";
  constexpr int64_t kRows = 33, kCols = 1000, kTokens = 5;  // a partial 32-column chunk at the end
  const Matrix m = randomMatrix(TensorType::kBF16, kRows, kCols, 1400);
  std::vector<float> x = randomActivations(kTokens, kCols, 9);
  std::vector<float> split(size_t(kTokens * kRows)), plain(split.size());
  matmulRows(m.view(), x.data(), kCols, kTokens, split.data(), kRows, 0, kRows, Isa::kAvx512Bf16);
  matmulRows(m.view(), x.data(), kCols, kTokens, plain.data(), kRows, 0, kRows, Isa::kAvx512);
  EXPECT_FALSE(bitwiseEqual(split, plain)) << "the float kernel ran, not vdpbf16ps";
  double err = 0, errOneHalf = 0, norm = 0;
  for (int64_t t = 0; t < kTokens; t++) {
    for (int64_t r = 0; r < kRows; r++) {
      double exact = 0, oneHalf = 0;
      for (int64_t k = 0; k < kCols; k++) {
        const float v = x[size_t(t * kCols + k)];
        const double w = m.dequantized[size_t(r * kCols + k)];
        exact += w * v;
        // v rounded to bf16 (to nearest even), as one half alone would keep it.
        const uint32_t bits = std::bit_cast<uint32_t>(v);
        oneHalf += w * std::bit_cast<float>((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u);
      }
      err += std::pow(split[size_t(t * kRows + r)] - exact, 2);
      errOneHalf += std::pow(oneHalf - exact, 2);
      norm += exact * exact;
    }
  }
  std::printf("NMSE against float64: two bf16 halves %.3g, one half %.3g\n", err / norm, errOneHalf / norm);
  EXPECT_LT(err / norm, 1e-9);
  EXPECT_LT(err * 1e4, errOneHalf) << "no better than bf16 activations";

  x[size_t(kCols + 700)] = INFINITY;  // token 1
  std::vector<float> y(split.size());
  matmulRows(m.view(), x.data(), kCols, kTokens, y.data(), kRows, 0, kRows, Isa::kAvx512Bf16);
  for (int64_t r = 0; r < kRows; r++) {
    const float w = m.dequantized[size_t(r * kCols + 700)];
    if (w != 0) {
      EXPECT_EQ(y[size_t(kRows + r)], std::copysign(INFINITY, w)) << "row " << r;
    }
  }
  EXPECT_TRUE(std::isfinite(y[0]) && std::isfinite(y[size_t(2 * kRows)]));
  x[size_t(kCols + 700)] = NAN;
  matmulRows(m.view(), x.data(), kCols, kTokens, y.data(), kRows, 0, kRows, Isa::kAvx512Bf16);
  for (int64_t r = 0; r < kRows; r++) EXPECT_TRUE(std::isnan(y[size_t(kRows + r)])) << "row " << r;
}

TEST(Matmul, PreparedActivationsAreOnlyForTheAmxProductsAndRefuseAMismatch) {
  EXPECT_FALSE(PreparedActivations::wanted(Isa::kAvx512Vnni, TensorType::kQ4_K, 64));
  EXPECT_FALSE(PreparedActivations::wanted(Isa::kAvx512Amx, TensorType::kQ4_0, 64));
  EXPECT_FALSE(PreparedActivations::wanted(Isa::kAvx512Amx, TensorType::kQ4_K, 1));
  if (!isaSupported(Isa::kAvx512Amx)) GTEST_SKIP() << "no usable AMX-INT8 here; the rest needs it";
  const Matrix m = randomMatrix(TensorType::kQ4_K, 16, 512, 3);
  const std::vector<float> x = randomActivations(16, 256, 4);
  PreparedActivations prepared;
  prepared.layOut(x.data(), 256, 0, prepared.reset(16, 256));
  std::vector<float> y(256);
  // 256 prepared columns against a 512-column matrix; and a type the tiles do not multiply.
  EXPECT_THROW(matmulRowsPrepared(m.view(), prepared, y.data(), 16, 0, 16, Isa::kAvx512Amx), Error);
  WeightView bad = m.view();
  bad.type = TensorType::kQ4_0;
  EXPECT_THROW(matmulRowsPrepared(bad, prepared, y.data(), 16, 0, 16, Isa::kAvx512Amx), Error);
  EXPECT_THROW(prepared.reset(16, 100), Error);
}

// --- The prompt path (matmulPromptRows): activations of one byte per element.

constexpr TensorType kPromptTypes[] = {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
                                       TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kQ8_0};

std::vector<Isa> promptIsasHere(TensorType type) {
  std::vector<Isa> out;
  for (Isa isa : isasHere()) {
    if (promptRowsOnBytes(isa, type)) out.push_back(isa);
  }
  return out;
}

// Activations whose blocks of 32 differ: ordinary ones, one a million times smaller, an all-zero
// one and one of values near 1e-35 (below the smallest block that takes the scale amax / 127).
std::vector<float> promptActivations(int64_t tokens, int64_t stride, uint32_t seed) {
  std::vector<float> x = randomActivations(tokens, stride, seed);
  for (int64_t t = 0; t < tokens; t++) {
    float* row = x.data() + t * stride;
    for (int64_t k = 32; k < 64; k++) row[k] *= 1e-6f;
    if (t % 3 == 0) std::fill(row + 64, row + 96, 0.0f);
    if (t % 4 == 1) {
      for (int64_t k = 96; k < 128; k++) row[k] *= 1e-35f;
    }
  }
  return x;
}

// Every output within the bound of byte activations from the float64 product of the dequantized
// weights: each activation is off by at most d / 2, d = amax / 127 of its block, so a result by at
// most sum |w| amax / 254 over its blocks (plus float rounding). And the path is taken: the
// results are not the ordinary (~15-bit) path's.
TEST(Matmul, PromptRowsOnByteActivationsStayWithinTheirBoundOfTheTruth) {
  constexpr int64_t kRows = 37;
  for (TensorType type : kPromptTypes) {
    const int64_t cols = colsFor(type);
    const Matrix m = randomMatrix(type, kRows, cols, 1300 + uint32_t(type));
    for (Isa isa : promptIsasHere(type)) {
      // 21 tokens: two token vectors of 8, then a tile of 4 and one token alone; 8: one vector.
      for (int64_t tokens : {21, 8, 3}) {
        SCOPED_TRACE(describe(type, isa, tokens));
        const int64_t xStride = cols + 3, yStride = kRows + 5;
        const std::vector<float> x = promptActivations(tokens, xStride, 11 * uint32_t(tokens));
        std::vector<float> y(size_t(tokens * yStride), NAN), ordinary(y.size(), NAN);
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 22}, {22, 23}, {23, 37}}) {
          matmulPromptRows(m.view(), x.data(), xStride, tokens, y.data(), yStride, begin, end, isa);
        }
        matmulRows(m.view(), x.data(), xStride, tokens, ordinary.data(), yStride, 0, kRows, isa);
        int64_t differ = 0;
        for (int64_t t = 0; t < tokens; t++) {
          const float* xt = x.data() + t * xStride;
          for (int64_t r = 0; r < kRows; r++) {
            double exact = 0, magnitude = 0, bound = 0;
            for (int64_t k0 = 0; k0 < cols; k0 += 32) {
              double amax = 0, weights = 0;
              for (int64_t k = k0; k < k0 + 32; k++) {
                const double w = m.dequantized[size_t(r * cols + k)];
                exact += w * xt[k];
                magnitude += std::abs(w * xt[k]);
                weights += std::abs(w);
                amax = std::max(amax, std::abs(double(xt[k])));
              }
              bound += weights * amax / 254;
            }
            const float got = y[size_t(t * yStride + r)];
            ASSERT_LE(std::abs(got - exact), bound * (1 + 1e-4) + 1e-5 * magnitude)
                << "row " << r << " token " << t << ": " << got << " against " << exact;
            if (got != ordinary[size_t(t * yStride + r)]) differ++;
          }
        }
        EXPECT_GT(differ, tokens * kRows / 2) << "the prompt path gave the ordinary path's results";
      }
    }
  }
}

// A prompt token's bits are a function of its own row: the same whole, in any row split, alone, in
// uneven batches, from prepared activations (PromptActivations, laid out by groups) - and the same
// on every Isa that has the path.
TEST(Matmul, PromptRowsGiveEachTokenTheSameBitsInAnyBatchAnySplitAndOnEveryIsa) {
  constexpr int64_t kRows = 45, kTokens = 29;
  for (TensorType type : kPromptTypes) {
    const std::vector<Isa> isas = promptIsasHere(type);
    if (isas.empty()) continue;
    const int64_t cols = colsFor(type);
    const Matrix m = randomMatrix(type, kRows, cols, 1700 + uint32_t(type));
    const std::vector<float> x = promptActivations(kTokens, cols, 99);
    std::vector<float> want(size_t(kTokens * kRows), NAN);
    matmulPromptRows(m.view(), x.data(), cols, kTokens, want.data(), kRows, 0, kRows, isas[0]);
    for (float v : want) ASSERT_TRUE(std::isfinite(v));
    for (Isa isa : isas) {
      SCOPED_TRACE(describe(type, isa, kTokens));
      std::vector<float> y(want.size(), NAN);
      matmulPromptRows(m.view(), x.data(), cols, kTokens, y.data(), kRows, 0, kRows, isa);
      EXPECT_TRUE(bitwiseEqual(want, y)) << "another Isa's bits (" << isaName(isas[0]) << ")";
      std::fill(y.begin(), y.end(), NAN);
      for (int64_t begin = 0; begin < kRows;) {
        const int64_t end = std::min<int64_t>(kRows, begin + 1 + begin % 6);
        matmulPromptRows(m.view(), x.data(), cols, kTokens, y.data(), kRows, begin, end, isa);
        begin = end;
      }
      EXPECT_TRUE(bitwiseEqual(want, y)) << "row splitting changed the result";
      std::fill(y.begin(), y.end(), NAN);
      for (int64_t t = 0; t < kTokens; t++) {
        matmulPromptRows(m.view(), x.data() + t * cols, cols, 1, y.data() + t * kRows, kRows, 0, kRows, isa);
      }
      EXPECT_TRUE(bitwiseEqual(want, y)) << "one token at a time differs from the batch";
      std::fill(y.begin(), y.end(), NAN);
      for (int64_t t = 0; t < kTokens;) {
        const int64_t n = std::min<int64_t>(kTokens - t, 3 + t % 11);
        matmulPromptRows(m.view(), x.data() + t * cols, cols, n, y.data() + t * kRows, kRows, 0, kRows, isa);
        t += n;
      }
      EXPECT_TRUE(bitwiseEqual(want, y)) << "batch composition changed the result";
      PromptActivations prepared;
      const int64_t groups = prepared.reset(isa, kTokens, cols);
      ASSERT_EQ(groups, 4);
      prepared.layOut(x.data(), cols, 2, groups);  // groups in any order, as threads take them
      prepared.layOut(x.data(), cols, 0, 2);
      std::fill(y.begin(), y.end(), NAN);
      matmulPromptRowsPrepared(m.view(), prepared, y.data(), kRows, 0, 20);
      matmulPromptRowsPrepared(m.view(), prepared, y.data(), kRows, 20, kRows);
      EXPECT_TRUE(bitwiseEqual(want, y)) << "prepared activations differ";
    }
  }
}

// A block holding inf or NaN carries it into the results, as on the ordinary path; types and
// Isas without the path are refused by name, and prepared activations must fit the product.
TEST(Matmul, PromptRowsPropagateNonFiniteBlocksAndRefuseWhatHasNoPath) {
  EXPECT_FALSE(promptRowsOnBytes(Isa::kScalar, TensorType::kQ4_K));
  // q8_0 only where the prompt kernels have vpdpbusd (its byte vectors would overflow vpmaddubsw).
  const bool vnniHere = isaSupported(Isa::kAvxVnni) || isaSupported(Isa::kAvx512Vnni);
  for (Isa isa : isasHere()) {
    const bool q8 = isa != Isa::kScalar && isa != Isa::kAvx2 && isa != Isa::kAvx512Amx && vnniHere;
    EXPECT_EQ(promptRowsOnBytes(isa, TensorType::kQ8_0), q8) << isaName(isa);
    EXPECT_FALSE(promptRowsOnBytes(isa, TensorType::kF16)) << isaName(isa);
  }
  if (isaSupported(Isa::kAvx512Amx)) {
    EXPECT_FALSE(promptRowsOnBytes(Isa::kAvx512Amx, TensorType::kQ4_K));  // on the tiles already
    EXPECT_TRUE(promptRowsOnBytes(Isa::kAvx512Amx, TensorType::kQ5_K));
  }
  const std::vector<Isa> isas = promptIsasHere(TensorType::kQ4_K);
  if (isas.empty()) GTEST_SKIP() << "no Isa here has the prompt path (it needs AVX2)";
  constexpr int64_t kRows = 8, kCols = 512, kTokens = 9;
  const Matrix m = randomMatrix(TensorType::kQ4_K, kRows, kCols, 5);
  std::vector<float> x = randomActivations(kTokens, kCols, 6);
  x[size_t(kCols + 300)] = INFINITY;  // token 1
  x[size_t(2 * kCols + 10)] = NAN;    // token 2
  for (Isa isa : isas) {
    SCOPED_TRACE(isaName(isa));
    std::vector<float> y(size_t(kTokens * kRows), 0.0f);
    matmulPromptRows(m.view(), x.data(), kCols, kTokens, y.data(), kRows, 0, kRows, isa);
    for (int64_t r = 0; r < kRows; r++) {
      EXPECT_FALSE(std::isfinite(y[size_t(kRows + r)])) << "row " << r;
      EXPECT_TRUE(std::isnan(y[size_t(2 * kRows + r)])) << "row " << r;
      EXPECT_TRUE(std::isfinite(y[size_t(r)]) && std::isfinite(y[size_t(3 * kRows + r)])) << "row " << r;
    }
    Matrix f16 = randomMatrix(TensorType::kF16, kRows, kCols, 7);
    EXPECT_THROW(matmulPromptRows(f16.view(), x.data(), kCols, kTokens, y.data(), kRows, 0, kRows, isa), Error);
    PromptActivations prepared;
    EXPECT_THROW(prepared.reset(isa, kTokens, 100), Error);
    prepared.layOut(x.data(), 256, 0, prepared.reset(isa, kTokens, 256));
    EXPECT_THROW(matmulPromptRowsPrepared(m.view(), prepared, y.data(), kRows, 0, kRows), Error);
  }
  PromptActivations prepared;
  EXPECT_THROW(prepared.reset(Isa::kScalar, kTokens, kCols), Error);
}

TEST(Matmul, RejectsShapesThatDoNotFitTheTypeOrTheMatrix) {
  const Matrix m = randomMatrix(TensorType::kQ4_K, 4, 256, 1);
  const std::vector<float> x(512, 1.0f);
  std::vector<float> y(16);
  WeightView bad = m.view();
  bad.cols = 250;
  EXPECT_THROW(matmulRows(bad, x.data(), 256, 1, y.data(), 4, 0, 4, Isa::kScalar), Error);
  bad = m.view();
  bad.rowStride = 100;
  EXPECT_THROW(matmulRows(bad, x.data(), 256, 1, y.data(), 4, 0, 4, Isa::kScalar), Error);
  EXPECT_THROW(matmulRows(m.view(), x.data(), 256, 1, y.data(), 4, 2, 5, Isa::kScalar), Error);
  bad = m.view();
  bad.type = TensorType::kIQ2_XS;
  EXPECT_THROW(matmulRows(bad, x.data(), 256, 1, y.data(), 4, 0, 4, Isa::kScalar), Error);
  // An empty range is fine and writes nothing.
  y.assign(16, NAN);
  matmulRows(m.view(), x.data(), 256, 1, y.data(), 4, 3, 3, Isa::kScalar);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// A group of products that shares its input (WeightView::inputEpoch: decode's q, k and v) gives
// each product the bits it has alone, whatever the types, the 256- or 512-bit kernels and the row
// chunks in between; a new epoch reads x afresh, even at the same address.
TEST(Matmul, AGroupSharingItsQuantizedInputGivesEachProductItsBitsAlone) {
  constexpr int64_t kCols = 512, kRows = 37;
  const TensorType types[] = {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ8_0,
                              TensorType::kQ5_K, TensorType::kQ4_0, TensorType::kF32};
  std::vector<Matrix> ms;
  for (TensorType type : types) ms.push_back(randomMatrix(type, kRows, kCols, 2100 + uint32_t(type)));
  uint64_t epoch = 1000;
  for (Isa isa : isasHere()) {
    for (int64_t tokens : {1, 3, 7}) {
      std::vector<float> x = randomActivations(tokens, kCols, 77 + uint32_t(tokens));
      for (int round = 0; round < 2; round++) {
        SCOPED_TRACE(std::string(isaName(isa)) + " " + std::to_string(tokens) + " tokens, round " +
                     std::to_string(round));
        std::vector<std::vector<float>> want;
        for (const Matrix& m : ms) {
          want.emplace_back(size_t(tokens * kRows), NAN);
          matmulRows(m.view(), x.data(), kCols, tokens, want.back().data(), kRows, 0, kRows, isa);
        }
        // One epoch for the group; the products interleaved in row chunks as a thread takes them,
        // on both kernel widths where the CPU has them.
        epoch++;
        std::vector<std::vector<float>> got(ms.size(), std::vector<float>(size_t(tokens * kRows), NAN));
        for (int64_t begin = 0; begin < kRows;) {
          const int64_t end = std::min<int64_t>(kRows, begin + 5 + begin % 7);
          for (size_t i = 0; i < ms.size(); i++) {
            WeightView v = ms[i].view();
            v.inputEpoch = epoch;
            v.narrowInt8 = (i + size_t(begin)) % 2 == 0;
            matmulRows(v, x.data(), kCols, tokens, got[i].data(), kRows, begin, end, isa);
          }
          begin = end;
        }
        for (size_t i = 0; i < ms.size(); i++) {
          EXPECT_TRUE(bitwiseEqual(want[i], got[i])) << quant::typeName(types[i]);
        }
        // The same buffer with other values: the next group (a new epoch) must not see the old ones.
        for (float& v : x) v = -0.5f * v + 0.25f;
      }
    }
  }
}

// Decode on a packed copy (packed_rows.h) gives every row the bits of the file layout's kernels: for
// any token count under a token vector, any split of the rows (groups of 8 cut by the split run on
// the file layout), one and several super-blocks, raw blocks with every weight and scale value, and
// tokens with a non-finite block or values at the quantizer's extremes. Corrupting the copy changes
// the rows it holds and no others: the kernels read it.
TEST(Matmul, PackedRowsGiveEveryRowTheBitsOfTheFileLayout) {
  constexpr int64_t kRows = 45;  // 5 groups of 8 and 5 rows outside any
  std::mt19937 rng(4242);
  const auto finiteHalf = [&] { return uint16_t(0x2000 + rng() % 0x3000); };  // 2^-7 .. 2^5
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    for (int64_t cols : {256, 768}) {
      Matrix m = randomMatrix(type, kRows, cols, 3100 + uint32_t(cols) + uint32_t(type));
      // Rows 16-23 as raw random blocks: every weight and scale value, finite d (and dmin).
      for (int64_t r = 16; r < 24; r++) {
        uint8_t* row = m.bytes.data() + size_t(r) * m.stride;
        for (size_t i = 0; i < *quant::rowBytes(type, cols); i++) row[i] = uint8_t(rng());
        for (int64_t u = 0; u < cols / quant::kQK_K; u++) {
          if (type == TensorType::kQ4_K) {
            auto& b = reinterpret_cast<quant::block_q4_K*>(row)[u];
            b.d = finiteHalf();
            b.dmin = finiteHalf();
            if (r == 16 && u == 0) std::memset(b.qs, 0xFF, sizeof b.qs);  // every weight 15
          } else if (type == TensorType::kQ5_K) {
            auto& b = reinterpret_cast<quant::block_q5_K*>(row)[u];
            b.d = finiteHalf();
            b.dmin = finiteHalf();
            if (r == 16 && u == 0) {  // every weight 31
              std::memset(b.qs, 0xFF, sizeof b.qs);
              std::memset(b.qh, 0xFF, sizeof b.qh);
            }
          } else {
            auto& b = reinterpret_cast<quant::block_q6_K*>(row)[u];
            b.d = finiteHalf();
            if (r == 16 && u == 0) {  // every weight 63
              std::memset(b.ql, 0xFF, sizeof b.ql);
              std::memset(b.qh, 0xFF, sizeof b.qh);
            }
          }
        }
      }
      std::vector<uint8_t> packed(packedBytes(type, kRows, cols));
      const size_t blockBytes = type == TensorType::kQ4_K   ? sizeof(PackedQ4_K)
                                : type == TensorType::kQ5_K ? sizeof(PackedQ5_K)
                                                            : sizeof(PackedQ6_K);
      ASSERT_EQ(packed.size(), size_t(kRows / kPackedRows * (cols / quant::kQK_K)) * blockBytes);
      packRows(m.view(), 0, kRows / kPackedRows, packed.data());
      for (Isa isa : isasHere()) {
        if (!packedDecode(isa, type)) continue;
        for (int64_t tokens = 1; tokens < 8; tokens++) {
          SCOPED_TRACE(describe(type, isa, tokens) + ", " + std::to_string(cols) + " columns");
          std::vector<float> x = randomActivations(tokens, cols, 900 + uint32_t(tokens));
          if (tokens > 1) x[size_t(cols) + 40] = tokens % 2 ? INFINITY : NAN;            // in token 1
          for (int64_t i = 0; i < cols; i++) x[size_t(i)] = i % 3 ? 1000.0f : -1000.0f;  // a = +-127
          std::vector<float> want(size_t(tokens * kRows), NAN);
          matmulRows(m.view(), x.data(), cols, tokens, want.data(), kRows, 0, kRows, isa);
          for (uint64_t epoch : {uint64_t(0), uint64_t(7000 + tokens)}) {
            WeightView v = m.view();
            v.packed = packed.data();
            v.inputEpoch = epoch;
            std::vector<float> whole(want.size(), NAN), split(want.size(), NAN);
            matmulRows(v, x.data(), cols, tokens, whole.data(), kRows, 0, kRows, isa);
            for (int64_t begin = 0; begin < kRows;) {
              const int64_t end = std::min<int64_t>(kRows, begin + 3 + begin % 11);
              matmulRows(v, x.data(), cols, tokens, split.data(), kRows, begin, end, isa);
              begin = end;
            }
            EXPECT_TRUE(bitwiseEqual(want, whole)) << "epoch " << epoch;
            EXPECT_TRUE(bitwiseEqual(want, split)) << "epoch " << epoch;
          }
          // Group 2 (rows 16-23) with other weights in the copy: those rows change, no others do.
          std::vector<uint8_t> corrupted = packed;
          const size_t groupBytes = packedBytes(type, kPackedRows, cols);
          for (size_t i = 2 * groupBytes; i < 3 * groupBytes; i++) corrupted[i] ^= 0x11;
          WeightView v = m.view();
          v.packed = corrupted.data();
          std::vector<float> got(want.size(), NAN);
          matmulRows(v, x.data(), cols, tokens, got.data(), kRows, 0, kRows, isa);
          int changed = 0;
          for (int64_t t = 0; t < tokens; t++) {
            for (int64_t r = 0; r < kRows; r++) {
              const float a = want[size_t(t * kRows + r)], b = got[size_t(t * kRows + r)];
              const bool same = std::memcmp(&a, &b, sizeof a) == 0;
              if (r < 16 || r >= 24) {
                EXPECT_TRUE(same) << "row " << r << " token " << t;
              } else if (!same) {
                changed++;
              }
            }
          }
          EXPECT_GE(changed, 8) << "the packed copy was not read";  // token 0 is finite in every row
        }
      }
    }
  }
  // No copy for other types, for fewer than 8 rows, or on the float kernels.
  EXPECT_EQ(packedBytes(TensorType::kQ8_0, 64, 512), 0u);
  EXPECT_EQ(packedBytes(TensorType::kQ4_K, 7, 512), 0u);
  EXPECT_FALSE(packedDecode(Isa::kAvx512, TensorType::kQ4_K));
  EXPECT_FALSE(packedDecode(Isa::kScalar, TensorType::kQ4_K));
}

}  // namespace
}  // namespace jitllm::cpu
