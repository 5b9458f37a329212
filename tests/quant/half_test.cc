#include "kernels/quant/half.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>

#include "kernels/cpu/gemm/isa.h"

namespace jitllm::quant {
namespace {

// The value of an fp16 bit pattern computed from its definition, in double.
double fp16Value(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(double(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(double(1024 + mantissa), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

TEST(Half, WideningIsExactForAll65536HalfBitPatterns) {
  int nans = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const float f = fp16ToFp32(uint16_t(h));
    const double want = fp16Value(uint16_t(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(std::signbit(f), bool(h & 0x8000)) << h;
      nans++;
      continue;
    }
    ASSERT_EQ(double(f), want) << "half 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(f), bool(h & 0x8000)) << h;  // -0 stays -0
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Half, NarrowingInvertsWideningForEveryHalfThatIsNotNan) {
  for (uint32_t h = 0; h < 65536; h++) {
    const float f = fp16ToFp32(uint16_t(h));
    if (std::isnan(f)) {
      const uint16_t back = fp32ToFp16(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00) << h;
      EXPECT_NE(back & 0x3ff, 0) << h;  // still a NaN, not infinity
      continue;
    }
    ASSERT_EQ(fp32ToFp16(f), h) << "half 0x" << std::hex << h;
  }
}

// Between every two neighbouring halves, the midpoint goes to the one with an even mantissa and
// the floats just either side of it go to the nearer one. Covers subnormals, the normal range and
// the overflow edge (65520 and above become infinity), for both signs.
TEST(Half, NarrowingRoundsToNearestEvenAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7c00; h++) {
    const double lo = fp16Value(uint16_t(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : fp16Value(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2);  // 12 significant bits: exact in float
    const uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(fp32ToFp16(s * mid), even | sign) << "between halves 0x" << std::hex << h;
      ASSERT_EQ(fp32ToFp16(s * std::nextafter(mid, 0.0f)), h | sign) << std::hex << h;
      ASSERT_EQ(fp32ToFp16(s * std::nextafter(mid, INFINITY)), (h + 1) | sign) << std::hex << h;
    }
  }
  EXPECT_EQ(fp32ToFp16(1e10f), 0x7c00);
  EXPECT_EQ(fp32ToFp16(-INFINITY), 0xfc00);
  EXPECT_EQ(fp32ToFp16(1e-10f), 0x0000);
  EXPECT_EQ(fp32ToFp16(-1e-10f), 0x8000);
}

__attribute__((target("f16c"))) uint16_t hardwareFp16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(Half, NarrowingMatchesF16cHardwareOnASweepOfAllFloatBitPatterns) {
  if (!cpu::detectCpuFeatures().f16c) GTEST_SKIP() << "this CPU has no F16C";
  int64_t checked = 0;
  // A stride coprime with 2^32 that visits every exponent and many mantissa tails.
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 65521) {
    const float f = std::bit_cast<float>(uint32_t(bits));
    ASSERT_EQ(fp32ToFp16(f), hardwareFp16(f)) << "float bits 0x" << std::hex << bits;
    checked++;
  }
  EXPECT_GT(checked, 60000);
}

TEST(Bf16, WideningIsExactAndNarrowingInvertsItForEveryNonNanPattern) {
  for (uint32_t b = 0; b < 65536; b++) {
    const float f = bf16ToFp32(uint16_t(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16ToFp32(fp32ToBf16(f)))) << b;
    } else {
      ASSERT_EQ(fp32ToBf16(f), b) << b;
    }
  }
}

TEST(Bf16, NarrowingRoundsToNearestEvenAtEveryMidpoint) {
  for (uint32_t b = 0; b < 0x7f80; b++) {
    // The midpoint between b and b+1 is the float with bits (b << 16) | 0x8000.
    const float mid = std::bit_cast<float>((b << 16) | 0x8000u);
    const uint16_t even = (b & 1) ? uint16_t(b + 1) : uint16_t(b);
    ASSERT_EQ(fp32ToBf16(mid), even) << b;
    ASSERT_EQ(fp32ToBf16(-mid), even | 0x8000) << b;
    ASSERT_EQ(fp32ToBf16(std::bit_cast<float>((b << 16) | 0x7fffu)), b) << b;
    ASSERT_EQ(fp32ToBf16(std::bit_cast<float>((b << 16) | 0x8001u)), b + 1) << b;
  }
  EXPECT_EQ(fp32ToBf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_TRUE(std::isnan(bf16ToFp32(fp32ToBf16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(Half, RowConversionsConvertEveryElement) {
  const float in[5] = {1.0f, -2.5f, 65504.0f, 0.1f, -0.0f};
  uint16_t h[5];
  float out[5];
  fp32ToFp16Row(in, h, 5);
  fp16ToFp32Row(h, out, 5);
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[1], 0xc100);
  EXPECT_EQ(h[2], 0x7bff);
  EXPECT_EQ(h[4], 0x8000);
  EXPECT_EQ(out[3], fp16ToFp32(fp32ToFp16(0.1f)));
  fp32ToBf16Row(in, h, 5);
  bf16ToFp32Row(h, out, 5);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(h[0], 0x3f80);
}

}  // namespace
}  // namespace jitllm::quant
