// The integer kernels' contract (kernels/cpu/gemm/matmul_int8.inc) written out in plain C++, and
// every integer path this CPU runs (AVX2, AVX-VNNI, AVX-512 VNNI, AMX) held to its bits: the
// paths give identical results because each is the contract, checked here against one
// reference that has no vector code at all. A CPU runs a subset of the paths; each one it runs
// is compared, and the reference makes a comparison possible even where only one runs.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm/int8_activation.h"
#include "kernels/cpu/gemm/matmul.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/half.h"
#include "kernels/quant/quantize.h"

namespace jitllm::cpu {
namespace {

using quant::TensorType;

// One token in the contract's integer form.
struct ReferenceRow {
  std::vector<int32_t> value;  // 256 a + b per element
  std::vector<float> scale;    // S per block of 32
  std::vector<float> bsum;     // S * sum of value over the block
};

// The exponent rule as matmul_int8.inc defines it, with the library calls (int8_activation.h's
// fast forms must agree: ActivationExponentIsTheDefinitionsEverywhere).
int referenceExponent(float amax) {
  if (!(amax > 0)) return 0;
  int exponent;
  std::frexp(amax, &exponent);
  int e = exponent - 7;
  if (amax > std::ldexp(127.0f, e)) e++;
  return e;
}

ReferenceRow quantizeReference(const float* x, int64_t cols) {
  ReferenceRow q;
  q.value.assign(size_t(cols), 0);
  for (int64_t j = 0; j < cols / 32; j++) {
    float amax = 0;
    bool nan = false;
    for (int64_t i = 0; i < 32; i++) {
      nan |= std::isnan(x[32 * j + i]);
      amax = std::max(amax, std::fabs(x[32 * j + i]));
    }
    if (nan) amax = std::numeric_limits<float>::quiet_NaN();
    if (!std::isfinite(amax)) {
      q.scale.push_back(amax);
      q.bsum.push_back(amax);
      continue;
    }
    const int e = referenceExponent(amax);
    int32_t sum = 0;
    for (int64_t i = 0; i < 32; i++) {
      float v = x[32 * j + i];
      // x / 2^e in two exact steps where 2^-e alone is no float.
      if (-e > 127) {
        v = (v * 0x1p64f) * std::ldexp(1.0f, -e - 64);
      } else {
        v *= std::ldexp(1.0f, -e);
      }
      const float a = std::nearbyint(v);  // round to nearest even, as cvtps2dq
      float b = std::nearbyint((v - a) * 256.0f);
      b = std::min(127.0f, std::max(-127.0f, b));
      q.value[size_t(32 * j + i)] = 256 * int32_t(a) + int32_t(b);
      sum += q.value[size_t(32 * j + i)];
    }
    const float s256 = std::ldexp(1.0f, e - 8);
    q.scale.push_back(s256);
    q.bsum.push_back(s256 * float(sum));
  }
  return q;
}

// The contract's lane trees: lanes 4 apart, then 2, then 1 (8 lanes); 16 lanes start 8 apart.
float sumTree8(const float* l) {
  const float h0 = l[0] + l[4], h1 = l[1] + l[5], h2 = l[2] + l[6], h3 = l[3] + l[7];
  return (h0 + h2) + (h1 + h3);
}

float sumTree16(const float* l) {
  float h[8];
  for (int i = 0; i < 8; i++) h[i] = l[i] + l[i + 8];
  return sumTree8(h);
}

float halfToFloat(uint16_t h) { return quant::fp16ToFp32(h); }

// q4_K and q5_K: the same float steps, q with a fifth bit from qh for q5_K.
template <class Block>
float referenceKMins(const uint8_t* row, int64_t cols, const ReferenceRow& x) {
  float acc[8] = {}, mins[8] = {};
  for (int64_t u = 0; u < cols / 256; u++) {
    const auto* blk = reinterpret_cast<const Block*>(row) + u;
    alignas(16) uint8_t raw[16];
    quant::unpackScalesMinsK4(blk->scales, raw);
    const float d = halfToFloat(blk->d), dmin = halfToFloat(blk->dmin);
    for (int g = 0; g < 8; g++) {
      const int64_t block = 8 * u + g;
      mins[g] = std::fma(float(raw[8 + g]) * dmin, x.bsum[size_t(block)], mins[g]);
      int32_t sum = 0;
      for (int i = 0; i < 32; i++) {
        const uint8_t byte = blk->qs[32 * (g / 2) + i];
        int q = g % 2 == 0 ? byte & 0xF : byte >> 4;
        if constexpr (std::is_same_v<Block, quant::block_q5_K>) q |= ((blk->qh[i] >> g) & 1) << 4;
        sum += q * x.value[size_t(32 * block + i)];
      }
      acc[g] = std::fma(float(sum), (float(raw[g]) * d) * x.scale[size_t(block)], acc[g]);
    }
  }
  return sumTree8(acc) - sumTree8(mins);
}

float referenceQ6_K(const uint8_t* row, int64_t cols, const ReferenceRow& x) {
  float acc[16] = {};
  for (int64_t u = 0; u < cols / 256; u++) {
    const auto* blk = reinterpret_cast<const quant::block_q6_K*>(row) + u;
    int q[256];
    for (int half = 0; half < 2; half++) {
      const uint8_t* ql = blk->ql + 64 * half;
      const uint8_t* qh = blk->qh + 32 * half;
      for (int l = 0; l < 32; l++) {
        q[128 * half + l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
        q[128 * half + 32 + l] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        q[128 * half + 64 + l] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        q[128 * half + 96 + l] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
      }
    }
    const float d = halfToFloat(blk->d);
    for (int g = 0; g < 16; g++) {
      int32_t sum = 0;
      for (int i = 0; i < 16; i++) sum += (q[16 * g + i] - 32) * x.value[size_t(256 * u + 16 * g + i)];
      acc[g] = std::fma(float(sum), (d * float(blk->scales[g])) * x.scale[size_t(8 * u + g / 2)], acc[g]);
    }
  }
  return sumTree16(acc);
}

float referenceQ8_0(const uint8_t* row, int64_t cols, const ReferenceRow& x) {
  float acc[8] = {};
  for (int64_t j = 0; j < cols / 32; j++) {
    const auto* blk = reinterpret_cast<const quant::block_q8_0*>(row) + j;
    int32_t sum = 0;
    for (int i = 0; i < 32; i++) sum += int32_t(blk->qs[i]) * x.value[size_t(32 * j + i)];
    acc[j % 8] = std::fma(float(sum), halfToFloat(blk->d) * x.scale[size_t(j)], acc[j % 8]);
  }
  return sumTree8(acc);
}

// q4_0, and q5_0 with its fifth bits (bit i of qh for element i) and an offset of 16.
template <class Block>
float referenceBlocks32(const uint8_t* row, int64_t cols, const ReferenceRow& x) {
  constexpr bool kFifthBit = std::is_same_v<Block, quant::block_q5_0>;
  float acc[8] = {};
  for (int64_t j = 0; j < cols / 32; j++) {
    const auto* blk = reinterpret_cast<const Block*>(row) + j;
    uint32_t qh = 0;
    if constexpr (kFifthBit) std::memcpy(&qh, blk->qh, sizeof qh);
    const int offset = kFifthBit ? 16 : 8;
    int32_t sum = 0;
    for (int i = 0; i < 16; i++) {
      const int lo = (blk->qs[i] & 0xF) | int((qh >> i) & 1) << 4;
      const int hi = (blk->qs[i] >> 4) | int((qh >> (16 + i)) & 1) << 4;
      sum += (lo - offset) * x.value[size_t(32 * j + i)];
      sum += (hi - offset) * x.value[size_t(32 * j + 16 + i)];
    }
    acc[j % 8] = std::fma(float(sum), halfToFloat(blk->d) * x.scale[size_t(j)], acc[j % 8]);
  }
  return sumTree8(acc);
}

float reference(TensorType type, const uint8_t* row, int64_t cols, const ReferenceRow& x) {
  switch (type) {
    case TensorType::kQ4_K:
      return referenceKMins<quant::block_q4_K>(row, cols, x);
    case TensorType::kQ5_K:
      return referenceKMins<quant::block_q5_K>(row, cols, x);
    case TensorType::kQ6_K:
      return referenceQ6_K(row, cols, x);
    case TensorType::kQ4_0:
      return referenceBlocks32<quant::block_q4_0>(row, cols, x);
    case TensorType::kQ5_0:
      return referenceBlocks32<quant::block_q5_0>(row, cols, x);
    case TensorType::kQ8_0:
      return referenceQ8_0(row, cols, x);
    default:
      ADD_FAILURE() << "no reference for " << quant::typeName(type);
      return 0;
  }
}

// The Isas that run the integer contract, as far as this CPU has them.
std::vector<Isa> integerIsasHere() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    if (isaSupported(isa)) out.push_back(isa);
  }
  return out;
}

struct Weights {
  TensorType type;
  int64_t rows, cols;
  size_t stride;
  std::vector<uint8_t> bytes;
  WeightView view() const { return WeightView{type, bytes.data(), rows, cols, stride}; }
};

Weights randomWeights(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  Weights w{type, rows, cols, *quant::rowBytes(type, cols) + 2, {}};
  w.bytes.assign(w.stride * size_t(rows), 0);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; r++) {
    const float offset = float(r % 3) * 0.4f, scale = 0.5f + float(r % 4);
    for (float& v : row) v = dist(rng) * scale + offset;
    quant::quantizeRow(type, row.data(), w.bytes.data() + size_t(r) * w.stride, cols);
  }
  return w;
}

// Activations with the blocks that test the quantizer's edges: all zeros, subnormals (where 2^-e
// alone would overflow), huge values, residuals of exactly one half (b clamps from 128 to 127),
// one large value among tiny ones, and ordinary normal values elsewhere. Even tokens are all
// ordinary: there no block dominates the sums, so every rounding of the float steps shows.
std::vector<float> edgyActivations(int64_t tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(tokens * cols));
  for (float& v : x) v = dist(rng);
  for (int64_t t = 1; t < tokens; t += 2) {
    float* row = x.data() + t * cols;
    const int64_t blocks = cols / 32;
    const int64_t kind0 = (t * 3) % blocks;
    for (int64_t i = 0; i < 32; i++) {
      row[32 * ((kind0 + 0) % blocks) + i] = 0.0f;
      row[32 * ((kind0 + 1) % blocks) + i] = std::ldexp(dist(rng), -140);
      row[32 * ((kind0 + 2) % blocks) + i] = dist(rng) * 1e30f;
      // With e = 0 (the block's maximum is 120): residuals of exactly +-1/2 (b = +-128, clamped
      // to 127) and 1/512 (b = 1/2, rounded to the even 0).
      const float halves[3] = {100.5f, -101.5f, 100.0f + 1.0f / 512.0f};
      row[32 * ((kind0 + 3) % blocks) + i] = i == 0 ? 120.0f : halves[i % 3];
      row[32 * ((kind0 + 4) % blocks) + i] = i == 7 ? 3e4f : dist(rng) * 1e-6f;
    }
  }
  return x;
}

std::string traceOf(TensorType type, Isa isa, int64_t cols, int64_t tokens) {
  return std::string(quant::typeName(type)) + " on " + isaName(isa) + ", " + std::to_string(cols) + " columns, " +
         std::to_string(tokens) + " tokens";
}

TEST(Int8Contract, EveryIntegerPathGivesTheReferenceBits) {
  const std::vector<Isa> isas = integerIsasHere();
  if (isas.empty()) GTEST_SKIP() << "this CPU runs no integer path (no AVX2): nothing to compare";
  struct Shape {
    TensorType type;
    int64_t cols;
  };
  // q8_0 rows of 15 and 1 blocks end in a partial unit of 8 (the tail), 2048 is a 1B-model row.
  // q4_0 and q5_0 as q8_0; 1152 is gemma3-1b's row (q5_0 in its Q4_K_M file).
  for (const Shape s : {Shape{TensorType::kQ4_K, 512}, Shape{TensorType::kQ4_K, 2048}, Shape{TensorType::kQ5_K, 512},
                        Shape{TensorType::kQ5_K, 2048}, Shape{TensorType::kQ6_K, 512}, Shape{TensorType::kQ6_K, 2048},
                        Shape{TensorType::kQ8_0, 480}, Shape{TensorType::kQ8_0, 32}, Shape{TensorType::kQ8_0, 2048},
                        Shape{TensorType::kQ4_0, 480}, Shape{TensorType::kQ4_0, 32}, Shape{TensorType::kQ4_0, 2048},
                        Shape{TensorType::kQ5_0, 480}, Shape{TensorType::kQ5_0, 32}, Shape{TensorType::kQ5_0, 1152}}) {
    constexpr int64_t kRows = 13;
    const Weights w = randomWeights(s.type, kRows, s.cols, 40 + uint32_t(s.cols) + uint32_t(s.type));
    for (int64_t tokens : {1, 2, 4, 5, 21}) {
      const std::vector<float> x = edgyActivations(tokens, s.cols, uint32_t(tokens));
      std::vector<float> expected(size_t(tokens * kRows));
      for (int64_t t = 0; t < tokens; t++) {
        const ReferenceRow q = quantizeReference(x.data() + t * s.cols, s.cols);
        for (int64_t r = 0; r < kRows; r++) {
          expected[size_t(t * kRows + r)] = reference(s.type, w.bytes.data() + size_t(r) * w.stride, s.cols, q);
        }
      }
      for (const float v : expected) ASSERT_TRUE(std::isfinite(v));
      for (Isa isa : isas) {
        SCOPED_TRACE(traceOf(s.type, isa, s.cols, tokens));
        // The hints (streaming, the prefill's column chunk; 48 is not a chunk: the default) change
        // the time, never the bits.
        struct Hints {
          bool streamed;
          int64_t prefillChunk;
        };
        for (const Hints hints :
             {Hints{false, 0}, Hints{true, 0}, Hints{false, 64}, Hints{false, 1024}, Hints{false, 48}}) {
          WeightView view = w.view();
          view.streamed = hints.streamed;
          view.prefillChunk = hints.prefillChunk;
          std::vector<float> y(expected.size(), NAN);
          matmulRows(view, x.data(), s.cols, tokens, y.data(), kRows, 0, 6, isa);
          matmulRows(view, x.data(), s.cols, tokens, y.data(), kRows, 6, kRows, isa);
          for (size_t i = 0; i < y.size(); i++) {
            ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(expected[i]))
                << "token " << i / kRows << " row " << i % kRows << ": " << y[i] << " vs " << expected[i]
                << (hints.streamed ? " (streamed)" : "") << " prefill chunk " << hints.prefillChunk;
          }
        }
      }
    }
  }
}

// The quantizers' fast exponent arithmetic is the definition's (frexp / ldexp) for every float
// magnitude: normal, subnormal, and at the edges where the rule bumps e.
TEST(Int8Contract, ActivationExponentIsTheDefinitionsEverywhere) {
  for (int n = -170; n <= 140; n++)
    ASSERT_EQ(std::bit_cast<uint32_t>(powerOfTwo(n)), std::bit_cast<uint32_t>(std::ldexp(1.0f, n))) << n;
  std::mt19937 rng(11);
  std::vector<float> amaxes = {0.0f,
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(),
                               127.0f,
                               127.5f,
                               128.0f,
                               63.99f,
                               1.0f};
  for (int i = 0; i < 200000; i++) amaxes.push_back(std::bit_cast<float>(uint32_t(rng()) & 0x7F7FFFFFu));
  for (float base : {127.0f, 127.25f, 126.99f}) {
    for (int n = -160; n < 120; n++) amaxes.push_back(std::ldexp(base, n));
  }
  for (float amax : amaxes) {
    ASSERT_EQ(activationExponent(amax), referenceExponent(amax)) << amax;
    const int e = activationExponent(amax);
    const BlockScaling s = blockScaling(e);
    ASSERT_TRUE(std::isfinite(s.inv) && s.inv > 0) << amax;
    ASSERT_EQ(double(s.pre) * double(s.inv), std::ldexp(1.0, -e)) << amax;
  }
}

// Every path's quantizer keeps NaN: the maximum over a block must not drop a NaN operand
// (vmaxps returns its second operand when either is NaN), wherever in the 32 it sits.
TEST(Int8Contract, ANanAnywhereInABlockReachesEveryResultOnEveryPath) {
  const Weights w = randomWeights(TensorType::kQ4_K, 5, 256, 9);
  for (Isa isa : kAllIsas) {
    if (!isaSupported(isa)) continue;
    for (int64_t column = 0; column < 64; column++) {
      SCOPED_TRACE(std::string(isaName(isa)) + ", NaN at column " + std::to_string(column));
      std::vector<float> x = edgyActivations(1, 256, 3);
      for (int64_t i = 0; i < 64; i++) x[size_t(i)] = float(i % 7) - 3.0f;
      x[size_t(column)] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> y(5, 0.0f);
      matmulRows(w.view(), x.data(), 256, 1, y.data(), 5, 0, 5, isa);
      for (float v : y) ASSERT_TRUE(std::isnan(v));
    }
  }
}

}  // namespace
}  // namespace jitllm::cpu
