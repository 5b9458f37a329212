#include "kernels/cpu/activation.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/vector_math.h"

namespace jitllm::cpu {
namespace {

// out[begin, end) = f(gate, up) 16 lanes at a time, the tail through the same lanes (masked loads
// and stores), never the scalar formula: an element's bits do not depend on where a range starts.
template <__m512 (*f)(__m512, __m512)>
__attribute__((target("avx512f"))) void rangeAvx512(const float* gate, const float* up, float* out, int64_t begin,
                                                    int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < end) {
    const __mmask16 m = __mmask16((1u << (end - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, f(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// The same 8 lanes at a time.
template <__m256 (*f)(__m256, __m256)>
__attribute__((target("avx2,fma"))) void rangeAvx2(const float* gate, const float* up, float* out, int64_t begin,
                                                   int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < end) {
    alignas(32) int32_t lanes[8];
    for (int l = 0; l < 8; l++) lanes[l] = l < end - i ? -1 : 0;
    const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    _mm256_maskstore_ps(out + i, m, f(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
  }
}

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

__attribute__((target("avx2,fma"))) __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// GEGLU's exponent: z = sqrt(8 / pi) (g + 0.044715 g^3), written as g (c + c 0.044715 g^2).
constexpr float kGeluScale = 1.5957691216057308f;
constexpr float kGeluCubic = 0.044715f * kGeluScale;

void gegluScalar(const float* gate, const float* up, float* out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i++) {
    const float g = gate[i];
    const float z = g * (kGeluScale + kGeluCubic * g * g);
    out[i] = g / (1.0f + std::exp(-z)) * up[i];
  }
}

__attribute__((target("avx512f"))) __m512 geglu16(__m512 g, __m512 u) {
  const __m512 z =
      _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_set1_ps(kGeluCubic), _mm512_mul_ps(g, g), _mm512_set1_ps(kGeluScale)));
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), z));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

__attribute__((target("avx2,fma"))) __m256 geglu8(__m256 g, __m256 u) {
  const __m256 z =
      _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), _mm256_mul_ps(g, g), _mm256_set1_ps(kGeluScale)));
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

}  // namespace

void gegluRange(const float* gate, const float* up, float* out, int64_t begin, int64_t end, Isa isa) {
  if (isa >= Isa::kAvx512) return rangeAvx512<geglu16>(gate, up, out, begin, end);
  if (isa >= Isa::kAvx2) return rangeAvx2<geglu8>(gate, up, out, begin, end);
  gegluScalar(gate, up, out, begin, end);
}

void swigluRange(const float* gate, const float* up, float* out, int64_t begin, int64_t end, Isa isa) {
  if (isa >= Isa::kAvx512) return rangeAvx512<swiglu16>(gate, up, out, begin, end);
  if (isa >= Isa::kAvx2) return rangeAvx2<swiglu8>(gate, up, out, begin, end);
  swigluScalar(gate, up, out, begin, end);
}

}  // namespace jitllm::cpu
