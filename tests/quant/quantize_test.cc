#include "kernels/quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"

namespace jitllm::quant {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> roundTrip(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(quantizedBytes(type, 1, int64_t(x.size())));
  quantizeRow(type, x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size(), NAN);
  dequantizeRow(type, q.data(), y.data(), int64_t(y.size()));
  return y;
}

// ||x - y|| / ||x||.
double relativeRmsError(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); i++) {
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    norm += double(x[i]) * x[i];
  }
  return std::sqrt(err / norm);
}

struct Bound {
  TensorType type;
  double maxRelativeRms;  // what a correct quantizer of that many bits stays below on N(0, 1)
  double minRelativeRms;  // and what it cannot beat (guards against a test that compares x to x)
};

// Upper bounds sit ~25% above the measured errors of ggml's reference quantizers on Gaussian
// data; a layout or rounding bug moves the error by far more.
constexpr Bound kBounds[] = {
    {TensorType::kF16, 2.6e-4, 1e-5},  {TensorType::kBF16, 2.1e-3, 1e-4}, {TensorType::kQ8_0, 6.7e-3, 1e-3},
    {TensorType::kQ4_0, 0.107, 0.05},  {TensorType::kQ4_1, 0.098, 0.04},  {TensorType::kQ5_0, 0.053, 0.02},
    {TensorType::kQ5_1, 0.048, 0.02},  {TensorType::kQ4_K, 0.089, 0.03},  {TensorType::kQ5_K, 0.045, 0.01},
    {TensorType::kQ6_K, 0.022, 0.005},
};

TEST(Quantize, RoundTripErrorOfEachTypeOnGaussianWeightsStaysWithinItsBitBudget) {
  const std::vector<float> x = gaussian(256 * 64, 7);
  for (const Bound& b : kBounds) {
    const double e = relativeRmsError(x, roundTrip(b.type, x));
    EXPECT_LT(e, b.maxRelativeRms) << typeName(b.type);
    EXPECT_GT(e, b.minRelativeRms) << typeName(b.type);
    RecordProperty(std::string(typeName(b.type)), std::to_string(e));
  }
  EXPECT_EQ(relativeRmsError(x, roundTrip(TensorType::kF32, x)), 0.0);
}

TEST(Quantize, RoundTripKeepsEveryElementWithinHalfAStepForTheSymmetricTypes) {
  // For q8_0 / q4_0 / q5_0 each element is off by at most half a quantization step (plus the
  // fp16 rounding of the scale), except the one clamped extreme which is off by at most a step.
  const std::vector<float> x = gaussian(32 * 200, 11, 3.0f);
  struct Step {
    TensorType type;
    float levels;  // d = amax / levels
  };
  for (Step s : {Step{TensorType::kQ8_0, 127}, Step{TensorType::kQ4_0, 8}, Step{TensorType::kQ5_0, 16}}) {
    const std::vector<float> y = roundTrip(s.type, x);
    for (size_t b = 0; b < x.size() / 32; b++) {
      float amax = 0;
      for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float d = amax / s.levels;
      for (int j = 0; j < 32; j++) {
        const size_t i = b * 32 + j;
        ASSERT_LE(std::fabs(x[i] - y[i]), 1.001f * d + amax * 1e-3f) << typeName(s.type) << " element " << i;
      }
    }
  }
}

TEST(Quantize, Q8_0AndQ4_0FollowGgmlsReferenceAlgorithmByteForByte) {
  float x[32];
  for (int j = 0; j < 32; j++) x[j] = float(j - 16);  // amax 16, at x[0] = -16
  block_q8_0 q8;
  quantizeRow(TensorType::kQ8_0, x, &q8, 32);
  EXPECT_EQ(q8.d, fp32ToFp16(16.0f / 127));
  EXPECT_EQ(q8.qs[0], -127);
  EXPECT_EQ(q8.qs[16], 0);
  EXPECT_EQ(q8.qs[31], int8_t(std::round(15.0f * (1.0f / (16.0f / 127)))));  // 119
  block_q4_0 q4;
  quantizeRow(TensorType::kQ4_0, x, &q4, 32);
  EXPECT_EQ(q4.d, fp32ToFp16(2.0f));  // max / -8 with max = -16
  // q = min(15, int8(x / 2 + 8.5)): x = -16 -> 0, x = -1 -> 8 (8.0), x = 15 -> 15 (clamped 16)
  EXPECT_EQ(q4.qs[0] & 0xF, 0);
  EXPECT_EQ(q4.qs[15] & 0xF, 8);
  EXPECT_EQ(q4.qs[15] >> 4, 15);
  EXPECT_EQ(q4.qs[0] >> 4, 8);  // x[16] = 0 -> 8.5 -> 8
}

TEST(Quantize, AllZeroRowsQuantizeToBlocksThatDecodeToZero) {
  const std::vector<float> zeros(512, 0.0f);
  for (const Bound& b : kBounds) {
    const std::vector<float> y = roundTrip(b.type, zeros);
    for (float v : y) ASSERT_EQ(v, 0.0f) << typeName(b.type);
  }
}

TEST(Quantize, KQuantsFitBlocksWithLargeOffsetsUsingTheirMins) {
  // A sub-block whose values sit far below zero is what the min of q4_K / q5_K is for (x =
  // scale * q - min with min >= 0); q4_0 (no min) must do far worse on it than q4_K.
  std::vector<float> x = gaussian(256 * 8, 5, 0.1f);
  for (size_t i = 0; i < x.size(); i++) x[i] -= float((i / 32) % 3) + 2.0f;
  const double k4 = relativeRmsError(x, roundTrip(TensorType::kQ4_K, x));
  const double k5 = relativeRmsError(x, roundTrip(TensorType::kQ5_K, x));
  const double q40 = relativeRmsError(x, roundTrip(TensorType::kQ4_0, x));
  EXPECT_LT(k4, 0.01);
  EXPECT_LT(k5, k4);
  EXPECT_LT(k4, q40);
}

TEST(Quantize, RejectsPartialBlocksAndUncomputableTypes) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> out(4096);
  EXPECT_THROW(quantizeRow(TensorType::kQ4_K, x.data(), out.data(), 300), Error);
  EXPECT_THROW(quantizeRow(TensorType::kIQ4_XS, x.data(), out.data(), 256), Error);
  EXPECT_THROW(quantizedBytes(TensorType::kQ8_0, 2, 33), Error);
  EXPECT_EQ(quantizedBytes(TensorType::kQ8_0, 3, 64), 3u * 68u);
  EXPECT_EQ(quantizedBytes(TensorType::kF16, 2, 5), 20u);
}

}  // namespace
}  // namespace jitllm::quant
