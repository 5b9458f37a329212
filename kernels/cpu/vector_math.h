// Vector math shared by the CPU kernels (functions carry their own target, so any translation
// unit may include this; call the 16-lane ones only when the Isa is kAvx512 or above, the 8-lane
// ones when it is kAvx2 or above).
#pragma once

#include <immintrin.h>

namespace jitllm::cpu {

// exp's range reduction and Cephes' degree-7 polynomial, shared by every width.
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// exp(x) for 16 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is exact to
// float rounding), exp(r) by Cephes' degree-7 polynomial, times 2^n by vscalefps, which
// overflows to inf, underflows to 0 and passes NaN through.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  // Beyond these exp is 0 or inf in float anyway; clamping keeps r exact for huge |x|. (max and
  // min return their second operand for a NaN, so NaN goes through.)
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// exp(x) for 8 lanes, the same clamps, reduction and polynomial as exp16. AVX2 has no vscalefps:
// 2^n is applied as two factors 2^(n/2) and 2^(n - n/2), each a normal float built in the
// exponent bits, so the product still overflows to inf and underflows through the subnormals to
// 0 as exp16's does. NaN goes through the clamps and the polynomial.
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n);  // in [-150, 128]
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 scale1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 scale2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, scale1), scale2);
}

}  // namespace jitllm::cpu
