#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/error.h"
#include "kernels/quant/half.h"

namespace jitllm::cpu {
namespace {

// dot(q, k) and acc += w * v over `n` values, k and v fp16. Three variants of each, chosen by
// the device's Isa; the vector ones need n to be a multiple of their width.
float dotScalar(const float* q, const uint16_t* k, int n) {
  float s = 0;
  for (int i = 0; i < n; i++) s += q[i] * quant::fp16ToFp32(k[i]);
  return s;
}
void axpyScalar(float* acc, float w, const uint16_t* v, int n) {
  for (int i = 0; i < n; i++) acc[i] += w * quant::fp16ToFp32(v[i]);
}

__attribute__((target("avx2,fma,f16c"))) float dotAvx2(const float* q, const uint16_t* k, int n) {
  __m256 s = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i)));
    s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, s);
  }
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
__attribute__((target("avx2,fma,f16c"))) void axpyAvx2(float* acc, float w, const uint16_t* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  for (int i = 0; i < n; i += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, vv, _mm256_loadu_ps(acc + i)));
  }
}

__attribute__((target("avx512f"))) float dotAvx512(const float* q, const uint16_t* k, int n) {
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __m512 kv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i)));
    s = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), kv, s);
  }
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx512f"))) void axpyAvx512(float* acc, float w, const uint16_t* v, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  for (int i = 0; i < n; i += 16) {
    const __m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, vv, _mm512_loadu_ps(acc + i)));
  }
}

struct HeadKernels {
  float (*dot)(const float*, const uint16_t*, int);
  void (*axpy)(float*, float, const uint16_t*, int);
};

HeadKernels kernelsFor(Isa isa, int headDim) {
  if (isa == Isa::kAvx512 && headDim % 16 == 0) return {dotAvx512, axpyAvx512};
  if (isa != Isa::kScalar && headDim % 8 == 0) return {dotAvx2, axpyAvx2};
  return {dotScalar, axpyScalar};
}

}  // namespace

void attendOneHead(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, Isa isa,
                   AttentionScratch& scratch) {
  const KvLayout& kv = batch.kv;
  const int hd = kv.headDim;
  const int group = batch.heads / kv.kvHeads;
  const int kvHead = head / group;
  const int64_t n = int64_t(batch.positions[token]) + 1;
  const uint8_t* const* pages = batch.pageTables[token];
  const size_t tokenBytes = kv.tokenBytes();
  const HeadKernels k = kernelsFor(isa, hd);

  const float* qh = q + (token * batch.heads + head) * hd;
  scratch.scores.resize(size_t(n));
  float maxScore = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    const uint8_t* page = pages[j / kv.pageTokens];
    const auto* kRow = reinterpret_cast<const uint16_t*>(page + size_t(j % kv.pageTokens) * tokenBytes) +
                       size_t(kvHead) * size_t(hd);
    const float s = k.dot(qh, kRow, hd) * batch.scale;
    scratch.scores[size_t(j)] = s;
    maxScore = std::max(maxScore, s);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; j++) {
    const float e = std::exp(scratch.scores[size_t(j)] - maxScore);
    scratch.scores[size_t(j)] = e;
    sum += e;
  }
  scratch.accum.assign(size_t(hd), 0.0f);
  for (int64_t j = 0; j < n; j++) {
    const uint8_t* page = pages[j / kv.pageTokens];
    const auto* vRow =
        reinterpret_cast<const uint16_t*>(page + size_t(kv.pageTokens + j % kv.pageTokens) * tokenBytes) +
        size_t(kvHead) * size_t(hd);
    k.axpy(scratch.accum.data(), scratch.scores[size_t(j)], vRow, hd);
  }
  float* o = out + (token * batch.heads + head) * hd;
  const float inv = float(1.0 / sum);
  for (int i = 0; i < hd; i++) o[i] = scratch.accum[size_t(i)] * inv;
}

}  // namespace jitllm::cpu
