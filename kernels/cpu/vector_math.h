// Vector math shared by the CPU kernels, for AVX-512 callers (functions carry their own target,
// so any translation unit may include this; call them only when the Isa is kAvx512 or above).
#pragma once

#include <immintrin.h>

namespace jitllm::cpu {

// exp(x) for 16 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is exact to
// float rounding), exp(r) by Cephes' degree-7 polynomial, times 2^n by vscalefps, which
// overflows to inf, underflows to 0 and passes NaN through.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  // Beyond these exp is 0 or inf in float anyway; clamping keeps r exact for huge |x|. (max and
  // min return their second operand for a NaN, so NaN goes through.)
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace jitllm::cpu
