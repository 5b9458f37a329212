#include "kernels/cpu/activation.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/vector_math.h"

namespace jitllm::cpu {
namespace {

void swigluScalar(const float* gate, const float* up, float* out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i++) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

__attribute__((target("avx512f"))) __m512 swiglu16(__m512 g, __m512 u) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

__attribute__((target("avx512f"))) void swigluAvx512(const float* gate, const float* up, float* out, int64_t begin,
                                                     int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    _mm512_storeu_ps(out + i, swiglu16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < end) {
    const __mmask16 m = __mmask16((1u << (end - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, swiglu16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void swigluRange(const float* gate, const float* up, float* out, int64_t begin, int64_t end, Isa isa) {
  if (isa >= Isa::kAvx512) return swigluAvx512(gate, up, out, begin, end);
  swigluScalar(gate, up, out, begin, end);
}

}  // namespace jitllm::cpu
