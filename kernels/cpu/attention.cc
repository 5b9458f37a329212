#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/quant/half.h"

namespace jitllm::cpu {
namespace {

// dot(q, k) and acc += w * v over `n` values of one cached K or V row, stored as fp16 (uint16_t)
// or fp32 (float). Three variants of each, chosen by the device's Isa; the vector ones need n to
// be a multiple of their width.
inline float widen(uint16_t h) { return quant::fp16ToFp32(h); }
inline float widen(float f) { return f; }

template <typename T>
float dotScalar(const float* q, const T* k, int n) {
  float s = 0;
  for (int i = 0; i < n; i++) s += q[i] * widen(k[i]);
  return s;
}
template <typename T>
void axpyScalar(float* acc, float w, const T* v, int n) {
  for (int i = 0; i < n; i++) acc[i] += w * widen(v[i]);
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

// The 8 lanes of a dot's accumulator summed: 4 apart, then 2, then 1 (dotAvx2 and dot4Avx2 share
// it, so four keys at once keep one key's bits).
__attribute__((target("avx2"))) inline float sumLanesAvx2(__m256 s) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

template <typename T>
__attribute__((target("avx2,fma,f16c"))) float dotAvx2(const float* q, const T* k, int n) {
  __m256 s = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), s);
  return sumLanesAvx2(s);
}
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void axpyAvx2(float* acc, float w, const T* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  for (int i = 0; i < n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, load8(v + i), _mm256_loadu_ps(acc + i)));
  }
}

// Four keys' dotAvx2 at once (as dot4Avx512 to dotAvx512): the same bits.
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void dot4Avx2(const float* q, const T* const* k, int n, float* out) {
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int i = 0; i < n; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    for (int c = 0; c < 4; c++) s[c] = _mm256_fmadd_ps(qv, load8(k[c] + i), s[c]);
  }
  for (int c = 0; c < 4; c++) out[c] = sumLanesAvx2(s[c]);
}

// acc = sum over j of w[j] * v(j) for kVectors * 8 values (at most 8 vectors: the weights and
// values take the rest of the 16 registers): axpyAvx2 over every j in order, the accumulator in
// registers. The same operations per value in the same order: the same bits.
template <int kVectors, typename T, typename RowOf>
__attribute__((target("avx2,fma,f16c"))) void weightedSumAvx2(float* acc, const float* w, int64_t n, RowOf rowOf) {
  __m256 a[kVectors];
  for (int i = 0; i < kVectors; i++) a[i] = _mm256_loadu_ps(acc + 8 * i);
  for (int64_t j = 0; j < n; j++) {
    const __m256 wv = _mm256_set1_ps(w[j]);
    const T* v = rowOf(j);
#pragma GCC unroll 8
    for (int i = 0; i < kVectors; i++) a[i] = _mm256_fmadd_ps(wv, load8(v + 8 * i), a[i]);
  }
  for (int i = 0; i < kVectors; i++) _mm256_storeu_ps(acc + 8 * i, a[i]);
}

__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
__attribute__((target("avx512f"))) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

template <typename T>
__attribute__((target("avx512f"))) float dotAvx512(const float* q, const T* k, int n) {
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + i), s);
  return _mm512_reduce_add_ps(s);
}
template <typename T>
__attribute__((target("avx512f"))) void axpyAvx512(float* acc, float w, const T* v, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  for (int i = 0; i < n; i += 16) {
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, load16(v + i), _mm512_loadu_ps(acc + i)));
  }
}

// Four keys' dotAvx512 at once: four independent chains (one alone waits on its FMA latency at
// every step), each the same operations in the same order as dotAvx512, so the same bits.
template <typename T>
__attribute__((target("avx512f"))) void dot4Avx512(const float* q, const T* const* k, int n, float* out) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int i = 0; i < n; i += 16) {
    const __m512 qv = _mm512_loadu_ps(q + i);
    s0 = _mm512_fmadd_ps(qv, load16(k[0] + i), s0);
    s1 = _mm512_fmadd_ps(qv, load16(k[1] + i), s1);
    s2 = _mm512_fmadd_ps(qv, load16(k[2] + i), s2);
    s3 = _mm512_fmadd_ps(qv, load16(k[3] + i), s3);
  }
  out[0] = _mm512_reduce_add_ps(s0);
  out[1] = _mm512_reduce_add_ps(s1);
  out[2] = _mm512_reduce_add_ps(s2);
  out[3] = _mm512_reduce_add_ps(s3);
}

// acc = sum over j of w[j] * v(j), for a head of kVectors * 16 values: axpyAvx512 over every j in
// order with the accumulator in registers instead of memory (there, each key's FMAs waited for
// the last key's stores). The same operations per value in the same order: the same bits.
template <int kVectors, typename T, typename RowOf>
__attribute__((target("avx512f"))) void weightedSumAvx512(float* acc, const float* w, int64_t n, RowOf rowOf) {
  __m512 a[kVectors];
  for (int i = 0; i < kVectors; i++) a[i] = _mm512_loadu_ps(acc + 16 * i);
  for (int64_t j = 0; j < n; j++) {
    const __m512 wv = _mm512_set1_ps(w[j]);
    const T* v = rowOf(j);
#pragma GCC unroll 16
    for (int i = 0; i < kVectors; i++) a[i] = _mm512_fmadd_ps(wv, load16(v + 16 * i), a[i]);
  }
  for (int i = 0; i < kVectors; i++) _mm512_storeu_ps(acc + 16 * i, a[i]);
}

template <typename T>
struct HeadKernels {
  float (*dot)(const float*, const T*, int);
  void (*axpy)(float*, float, const T*, int);
  void (*dot4)(const float*, const T* const*, int, float*);  // null: dot one key at a time
  int lanes;                                                 // 16 (AVX-512), 8 (AVX2) or 1
};

template <typename T>
HeadKernels<T> kernelsFor(Isa isa, int headDim) {
  if (isa >= Isa::kAvx512 && headDim % 16 == 0) return {dotAvx512<T>, axpyAvx512<T>, dot4Avx512<T>, 16};
  if (isa != Isa::kScalar && headDim % 8 == 0) return {dotAvx2<T>, axpyAvx2<T>, dot4Avx2<T>, 8};
  return {dotScalar<T>, axpyScalar<T>, nullptr, 1};
}

// scores[j] = exp(scores[j] - shift): elementwise, so a score's bits do not depend on n.
__attribute__((target("avx512f"))) void expShiftedAvx512(float* scores, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(scores + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + j), s)));
  if (j < n) {
    const __mmask16 m = __mmask16((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(scores + j, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), s)));
  }
}

// The same 8 lanes at a time with exp8 (exp16's bits), the tail through a padded copy.
__attribute__((target("avx2,fma"))) void expShiftedAvx2(float* scores, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(scores + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + j), s)));
  if (j < n) {
    alignas(32) float tail[8] = {};
    std::copy(scores + j, scores + n, tail);
    _mm256_store_ps(tail, exp8(_mm256_sub_ps(_mm256_load_ps(tail), s)));
    std::copy(tail, tail + (n - j), scores + j);
  }
}

void expShifted(float* scores, int64_t n, float shift, Isa isa) {
  if (isa >= Isa::kAvx512) return expShiftedAvx512(scores, n, shift);
  if (isa >= Isa::kAvx2) return expShiftedAvx2(scores, n, shift);
  for (int64_t j = 0; j < n; j++) scores[j] = std::exp(scores[j] - shift);
}

template <typename T>
void attend(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, Isa isa,
            AttentionScratch& scratch) {
  const KvLayout& kv = batch.kv;
  const int hd = kv.headDim;
  const int group = batch.heads / kv.kvHeads;
  const int kvHead = head / group;
  // Positions [first, first + n): all so far, or the sliding window's last ones.
  const int64_t seen = int64_t(batch.positions[token]) + 1;
  const int64_t first = batch.window > 0 ? std::max<int64_t>(0, seen - batch.window) : 0;
  const int64_t n = seen - first;
  const uint8_t* const* pages = batch.pageTables[token];
  const size_t tokenBytes = kv.tokenBytes();
  const HeadKernels<T> k = kernelsFor<T>(isa, hd);
  auto row = [&](int64_t i, int which) {  // i-th position of the window; which: 0 = K, 1 = V
    const int64_t j = first + i;
    const uint8_t* page = pages[j / kv.pageTokens];
    return reinterpret_cast<const T*>(page + size_t(which * kv.pageTokens + j % kv.pageTokens) * tokenBytes) +
           size_t(kvHead) * size_t(hd);
  };

  const float* qh = q + (token * batch.heads + head) * hd;
  scratch.scores.resize(size_t(n));
  float* scores = scratch.scores.data();
  int64_t j = 0;
  if (k.dot4 != nullptr) {
    for (; j + 4 <= n; j += 4) {
      const T* keys[4] = {row(j, 0), row(j + 1, 0), row(j + 2, 0), row(j + 3, 0)};
      k.dot4(qh, keys, hd, scores + j);
    }
  }
  for (; j < n; j++) scores[j] = k.dot(qh, row(j, 0), hd);
  float maxScore = -INFINITY;
  for (j = 0; j < n; j++) {
    scores[j] *= batch.scale;
    maxScore = std::max(maxScore, scores[j]);
  }
  expShifted(scratch.scores.data(), n, maxScore, isa);
  double sum = 0;
  for (int64_t j = 0; j < n; j++) sum += scratch.scores[size_t(j)];
  scratch.accum.assign(size_t(hd), 0.0f);
  const auto valueRow = [&](int64_t i) { return row(i, 1); };
  if (k.lanes == 16 && hd == 32) {
    weightedSumAvx512<2, T>(scratch.accum.data(), scores, n, valueRow);
  } else if (k.lanes == 16 && hd == 64) {
    weightedSumAvx512<4, T>(scratch.accum.data(), scores, n, valueRow);
  } else if (k.lanes == 16 && hd == 128) {
    weightedSumAvx512<8, T>(scratch.accum.data(), scores, n, valueRow);
  } else if (k.lanes == 16 && hd == 256) {
    weightedSumAvx512<16, T>(scratch.accum.data(), scores, n, valueRow);
  } else if (k.lanes == 8 && hd % 32 == 0) {
    // 64 values (32 at the end) per pass over the window: each value's FMAs in the same order.
    for (int part = 0; part < hd; part += 64) {
      const auto partRow = [&](int64_t i) { return valueRow(i) + part; };
      if (hd - part >= 64) {
        weightedSumAvx2<8, T>(scratch.accum.data() + part, scores, n, partRow);
      } else {
        weightedSumAvx2<4, T>(scratch.accum.data() + part, scores, n, partRow);
      }
    }
  } else {
    for (j = 0; j < n; j++) k.axpy(scratch.accum.data(), scores[j], row(j, 1), hd);
  }
  float* o = out + (token * batch.heads + head) * hd;
  const float inv = float(1.0 / sum);
  for (int i = 0; i < hd; i++) o[i] = scratch.accum[size_t(i)] * inv;
}

}  // namespace

void attendOneHead(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, Isa isa,
                   AttentionScratch& scratch) {
  if (batch.kv.precision == KvPrecision::kF16) {
    attend<uint16_t>(q, out, batch, token, head, isa, scratch);
  } else {
    attend<float>(q, out, batch, token, head, isa, scratch);
  }
}

}  // namespace jitllm::cpu
