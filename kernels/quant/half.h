// IEEE binary16 (fp16) and bfloat16 <-> binary32 conversions, exact and portable.
//
// Widening (to fp32) is exact for every input. Narrowing rounds to nearest, ties to even, as the
// hardware (F16C's VCVTPS2PH with rounding mode 0, AVX512-BF16's VCVTNEPS2BF16) and ggml do;
// overflow gives infinity, NaN stays NaN (made quiet, sign and top payload bits kept).
//
// These are plain integer code on purpose: they must give the same bits on every x86-64, so the
// SIMD kernels that use F16C instructions for speed (kernels/cpu/gemm) are checked against them.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstdint>

namespace jitllm::quant {

inline float fp16ToFp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in binary32.
    const float magnitude = float(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t fp32ToFp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x47800000u) return uint16_t(sign | 0x7c00u);                        // >= 65536 (or inf): infinity
  if (a >= 0x38800000u) {
    // Normal in fp16: drop 13 mantissa bits with round-to-nearest-even. A carry out of the
    // mantissa bumps the exponent, which is right (and turns 65520..65535 into infinity).
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return uint16_t(sign | (rounded >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 itself ties to even 0)
  // Subnormal in fp16: the result is round(|f| / 2^-24); |f| = m * 2^(e-150) with 24-bit m.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (q & 1u))) q++;
  return uint16_t(sign | q);  // q == 0x400 is the smallest normal, encoded correctly
}

inline float bf16ToFp32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t fp32ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline void fp16ToFp32Row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = fp16ToFp32(src[i]);
}
inline void fp32ToFp16Row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = fp32ToFp16(src[i]);
}
inline void bf16ToFp32Row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = bf16ToFp32(src[i]);
}
inline void fp32ToBf16Row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = fp32ToBf16(src[i]);
}

}  // namespace jitllm::quant
