#include "kernels/cpu/attention.h"

// GCC 12 warns that the "undefined" pass-through vectors inside its own intrinsics are used
// uninitialized (GCC bug 105593, fixed in 13); the warning is about the header, not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <type_traits>

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
__attribute__((target("avx2,fma,f16c"))) inline void dot4Avx2(const float* q, const T* const* k, int n, float* out) {
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int i = 0; i < n; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    for (int c = 0; c < 4; c++) s[c] = _mm256_fmadd_ps(qv, load8(k[c] + i), s[c]);
  }
  for (int c = 0; c < 4; c++) out[c] = sumLanesAvx2(s[c]);
}

// Eight keys' dotAvx2 at once: eight chains (enough to cover the FMA latency), reduced together by
// sumLanesAvx2's tree done on all eight at once - lanes i and i + 4, then 0 + 2 and 1 + 3, then
// those two: the same additions of the same values, so the same bits as one key at a time.
template <typename T>
__attribute__((target("avx2,fma,f16c"))) inline void dot8Avx2(const float* q, const T* const* k, int n, float* out) {
  const __m256 z = _mm256_setzero_ps();
  __m256 s[8] = {z, z, z, z, z, z, z, z};
  for (int i = 0; i < n; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) s[c] = _mm256_fmadd_ps(qv, load8(k[c] + i), s[c]);
  }
  __m256 m[4];  // key c's four sums in lanes 0-3, key c + 4's in lanes 4-7
  for (int c = 0; c < 4; c++) {
    m[c] = _mm256_add_ps(_mm256_permute2f128_ps(s[c], s[c + 4], 0x20), _mm256_permute2f128_ps(s[c], s[c + 4], 0x31));
  }
  // Lanes 0 + 2 and 1 + 3 of keys c and c + 1 (and of c + 4, c + 5).
  const __m256 p01 = _mm256_add_ps(_mm256_shuffle_ps(m[0], m[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(m[0], m[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 p23 = _mm256_add_ps(_mm256_shuffle_ps(m[2], m[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(m[2], m[3], _MM_SHUFFLE(3, 2, 3, 2)));
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),
                                      _mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(3, 1, 3, 1))));
}

// The running sums of kHeads heads' exponentials in double, in order, as separate scalars: kept
// as an array, GCC vectorizes them into one vector it keeps in memory, a store-to-load round trip
// on every step of the chain.
template <int kHeads>
struct HeadSums {
  static_assert(kHeads == 1 || kHeads == 2 || kHeads == 4);
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  explicit HeadSums(const double* p) {
    s0 = p[0];
    if constexpr (kHeads > 1) s1 = p[1];
    if constexpr (kHeads > 2) {
      s2 = p[2];
      s3 = p[3];
    }
  }
  void add(const float* w, int64_t stride, int64_t j) {
    s0 += double(w[j]);
    if constexpr (kHeads > 1) s1 += double(w[stride + j]);
    if constexpr (kHeads > 2) {
      s2 += double(w[2 * stride + j]);
      s3 += double(w[3 * stride + j]);
    }
  }
  void store(double* p) const {
    p[0] = s0;
    if constexpr (kHeads > 1) p[1] = s1;
    if constexpr (kHeads > 2) {
      p[2] = s2;
      p[3] = s3;
    }
  }
};

// For each of kHeads heads h: acc_h = sum over j of w_h[j] * v(j) over kVectors * 8 values (the
// accumulators take at most 8 registers, the shared values and weights the rest of the 16): axpyAvx2
// over every j in order, the accumulators in registers; heads sharing a KV head share each value's
// load, and two heads' chains keep the FMAs busy where one head's alone wait on their latency. The
// same operations per value in the same order: the same bits. kSum: also sums_h += w_h[j] in
// double, in order (the softmax's denominator, its chain overlapping the FMAs).
template <int kVectors, int kHeads, bool kSum, typename T, typename RowOf>
__attribute__((target("avx2,fma,f16c"))) void weightedSumAvx2(float* acc, int64_t accStride, const float* w,
                                                              int64_t wStride, int64_t n, RowOf rowOf, double* sums) {
  static_assert(kVectors * kHeads <= 8);
  __m256 a[kHeads][kVectors];
  HeadSums<kHeads> sum(sums);
  for (int h = 0; h < kHeads; h++) {
    for (int i = 0; i < kVectors; i++) a[h][i] = _mm256_loadu_ps(acc + h * accStride + 8 * i);
  }
  for (int64_t j = 0; j < n; j++) {
    __m256 wv[kHeads];
    for (int h = 0; h < kHeads; h++) wv[h] = _mm256_set1_ps(w[h * wStride + j]);
    if constexpr (kSum) sum.add(w, wStride, j);
    const T* v = rowOf(j);
#pragma GCC unroll 8
    for (int i = 0; i < kVectors; i++) {
      const __m256 vi = load8(v + 8 * i);
      for (int h = 0; h < kHeads; h++) a[h][i] = _mm256_fmadd_ps(wv[h], vi, a[h][i]);
    }
  }
  for (int h = 0; h < kHeads; h++) {
    for (int i = 0; i < kVectors; i++) _mm256_storeu_ps(acc + h * accStride + 8 * i, a[h][i]);
  }
  if constexpr (kSum) sum.store(sums);
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
__attribute__((target("avx512f"))) inline void dot4Avx512(const float* q, const T* const* k, int n, float* out) {
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

// weightedSumAvx2's 16-lane form (at most 16 accumulators of the 32 registers): the same bits as
// axpyAvx512 over every j in order (there, each key's FMAs waited for the last key's stores).
template <int kVectors, int kHeads, bool kSum, typename T, typename RowOf>
__attribute__((target("avx512f"))) void weightedSumAvx512(float* acc, int64_t accStride, const float* w,
                                                          int64_t wStride, int64_t n, RowOf rowOf, double* sums) {
  static_assert(kVectors * kHeads <= 16);
  __m512 a[kHeads][kVectors];
  HeadSums<kHeads> sum(sums);
  for (int h = 0; h < kHeads; h++) {
    for (int i = 0; i < kVectors; i++) a[h][i] = _mm512_loadu_ps(acc + h * accStride + 16 * i);
  }
  for (int64_t j = 0; j < n; j++) {
    __m512 wv[kHeads];
    for (int h = 0; h < kHeads; h++) wv[h] = _mm512_set1_ps(w[h * wStride + j]);
    if constexpr (kSum) sum.add(w, wStride, j);
    const T* v = rowOf(j);
#pragma GCC unroll 16
    for (int i = 0; i < kVectors; i++) {
      const __m512 vi = load16(v + 16 * i);
      for (int h = 0; h < kHeads; h++) a[h][i] = _mm512_fmadd_ps(wv[h], vi, a[h][i]);
    }
  }
  for (int h = 0; h < kHeads; h++) {
    for (int i = 0; i < kVectors; i++) _mm512_storeu_ps(acc + h * accStride + 16 * i, a[h][i]);
  }
  if constexpr (kSum) sum.store(sums);
}

// scores[j] = dot(q, keys[j]) for j < n: eight keys at a time where the Isa reduces eight together,
// four, then one (each key's bits those of its one-key dot).
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void scoresAvx2(const float* q, const T* const* keys, int64_t n, int hd,
                                                         float* scores) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) dot8Avx2(q, keys + j, hd, scores + j);
  for (; j + 4 <= n; j += 4) dot4Avx2(q, keys + j, hd, scores + j);
  for (; j < n; j++) scores[j] = dotAvx2(q, keys[j], hd);
}
template <typename T>
__attribute__((target("avx512f"))) void scoresAvx512(const float* q, const T* const* keys, int64_t n, int hd,
                                                     float* scores) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) dot4Avx512(q, keys + j, hd, scores + j);
  for (; j < n; j++) scores[j] = dotAvx512(q, keys[j], hd);
}
template <typename T>
void scoresScalar(const float* q, const T* const* keys, int64_t n, int hd, float* scores) {
  for (int64_t j = 0; j < n; j++) scores[j] = dotScalar(q, keys[j], hd);
}

template <typename T>
struct HeadKernels {
  void (*scores)(const float*, const T* const*, int64_t, int, float*);
  void (*axpy)(float*, float, const T*, int);
  int lanes;  // 16 (AVX-512), 8 (AVX2) or 1
};

template <typename T>
HeadKernels<T> kernelsFor(Isa isa, int headDim) {
  if (isa >= Isa::kAvx512 && headDim % 16 == 0) return {scoresAvx512<T>, axpyAvx512<T>, 16};
  if (isa != Isa::kScalar && headDim % 8 == 0) return {scoresAvx2<T>, axpyAvx2<T>, 8};
  return {scoresScalar<T>, axpyScalar<T>, 1};
}

// scores[j] *= scale for j in [begin, n), and the maximum of maxScore and those as std::max in order.
float scaleAndMaxFrom(float* scores, int64_t begin, int64_t n, float scale, float maxScore) {
  for (int64_t j = begin; j < n; j++) {
    scores[j] *= scale;
    maxScore = std::max(maxScore, scores[j]);
  }
  return maxScore;
}

// scaleAndMaxFrom(scores, 0, n, scale, -inf) 8 lanes at a time: a NaN score is skipped as there
// (vmaxps returns its second operand on NaN), and ties between +0 and -0, where the order could
// pick either, shift every score by the same zero.
__attribute__((target("avx2"))) float scaleAndMaxAvx2(float* scores, int64_t n, float scale) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(scores + j), sv);
    _mm256_storeu_ps(scores + j, v);
    mv = _mm256_max_ps(v, mv);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float maxScore = -INFINITY;
  for (float v : lanes) maxScore = std::max(maxScore, v);
  return scaleAndMaxFrom(scores, j, n, scale, maxScore);
}

float scaleAndMax(float* scores, int64_t n, float scale, Isa isa) {
  if (isa >= Isa::kAvx2) return scaleAndMaxAvx2(scores, n, scale);
  return scaleAndMaxFrom(scores, 0, n, scale, -INFINITY);
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

// weightedSumAvx2 and weightedSumAvx512 as policies: their lanes, how many accumulators a pass
// may keep in registers, and the fewest vectors a pass takes (AVX2: 4, so that each value's load
// serves 4 FMAs per head; weightedSums sends it only head dims it divides).
struct WeightedSumAvx2 {
  static constexpr int kLanes = 8, kAccumulators = 8, kMinVectors = 4;
  template <int kVectors, int kHeads, bool kSum, typename T, typename RowOf>
  static void run(float* acc, int64_t accStride, const float* w, int64_t wStride, int64_t n, RowOf rowOf,
                  double* sums) {
    weightedSumAvx2<kVectors, kHeads, kSum, T>(acc, accStride, w, wStride, n, rowOf, sums);
  }
};
struct WeightedSumAvx512 {
  static constexpr int kLanes = 16, kAccumulators = 16, kMinVectors = 2;
  template <int kVectors, int kHeads, bool kSum, typename T, typename RowOf>
  static void run(float* acc, int64_t accStride, const float* w, int64_t wStride, int64_t n, RowOf rowOf,
                  double* sums) {
    weightedSumAvx512<kVectors, kHeads, kSum, T>(acc, accStride, w, wStride, n, rowOf, sums);
  }
};

// Heads h .. h + kHeads - 1 (scores: a row of n per head; accum: hd per head), kVectors * lanes
// values a pass over the window; the first pass also sums the exponentials.
template <class Kernel, int kVectors, int kHeads, typename T, typename RowOf>
void headPasses(int hd, int h, const float* scores, int64_t n, RowOf valueRow, float* accum, double* sums) {
  constexpr int kPart = kVectors * Kernel::kLanes;
  for (int p = 0; p < hd; p += kPart) {
    const auto partRow = [&](int64_t i) { return valueRow(i) + p; };
    float* acc = accum + h * hd + p;
    if (p == 0) {
      Kernel::template run<kVectors, kHeads, true, T>(acc, hd, scores + h * n, n, n, partRow, sums + h);
    } else {
      Kernel::template run<kVectors, kHeads, false, T>(acc, hd, scores + h * n, n, n, partRow, sums + h);
    }
  }
}

// headPasses with the widest pass (at most 8 vectors) that the accumulators leave room for beside
// kHeads heads and that divides hd (kMinVectors * lanes does).
template <class Kernel, int kHeads, typename T, typename RowOf>
void widestPasses(int hd, int h, const float* scores, int64_t n, RowOf valueRow, float* accum, double* sums) {
  constexpr int kMost = std::min(8, Kernel::kAccumulators / kHeads);
  static_assert(kMost >= Kernel::kMinVectors);
  if constexpr (kMost >= 8) {
    if (hd % (8 * Kernel::kLanes) == 0)
      return headPasses<Kernel, 8, kHeads, T>(hd, h, scores, n, valueRow, accum, sums);
  }
  if constexpr (kMost >= 4) {
    if (hd % (4 * Kernel::kLanes) == 0)
      return headPasses<Kernel, 4, kHeads, T>(hd, h, scores, n, valueRow, accum, sums);
  }
  headPasses<Kernel, Kernel::kMinVectors, kHeads, T>(hd, h, scores, n, valueRow, accum, sums);
}

// Every head of count: 4, 2 or 1 at a time, as many as leave each pass kMinVectors vectors.
template <class Kernel, typename T, typename RowOf>
void allHeads(int hd, int count, const float* scores, int64_t n, RowOf valueRow, float* accum, double* sums) {
  constexpr bool kFour = 4 * Kernel::kMinVectors <= Kernel::kAccumulators;
  static_assert(2 * Kernel::kMinVectors <= Kernel::kAccumulators);
  for (int h = 0; h < count;) {
    if (kFour && count - h >= 4) {  // (4 heads instantiated only where they fit)
      widestPasses<Kernel, kFour ? 4 : 1, T>(hd, h, scores, n, valueRow, accum, sums);
      h += 4;
    } else if (count - h >= 2) {
      widestPasses<Kernel, 2, T>(hd, h, scores, n, valueRow, accum, sums);
      h += 2;
    } else {
      widestPasses<Kernel, 1, T>(hd, h, scores, n, valueRow, accum, sums);
      h += 1;
    }
  }
}

// The weighted sums of `count` heads' exponentials (scores: count x n) over their V rows into
// accum (count x hd, zero), and each head's sum of the exponentials in double into sums (zero).
template <typename T, typename RowOf>
void weightedSums(const HeadKernels<T>& k, int hd, int count, const float* scores, int64_t n, RowOf valueRow,
                  float* accum, double* sums) {
  if (k.lanes == 16 && hd % 32 == 0) return allHeads<WeightedSumAvx512, T>(hd, count, scores, n, valueRow, accum, sums);
  if (k.lanes == 8 && hd % 32 == 0) return allHeads<WeightedSumAvx2, T>(hd, count, scores, n, valueRow, accum, sums);
  for (int h = 0; h < count; h++) {
    const float* w = scores + h * n;
    for (int64_t j = 0; j < n; j++) sums[h] += double(w[j]);
    for (int64_t j = 0; j < n; j++) k.axpy(accum + h * hd, w[j], valueRow(j), hd);
  }
}

template <typename T>
std::vector<const T*>& rowsOf(AttentionScratch& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return scratch.rowsF32;
  } else {
    return scratch.rowsF16;
  }
}

template <typename T>
void attend(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, int count, Isa isa,
            AttentionScratch& scratch) {
  const KvLayout& kv = batch.kv;
  const int hd = kv.headDim;
  const int group = batch.heads / kv.kvHeads;
  const int kvHead = head / group;
  JITLLM_ASSERT(count >= 1 && count <= kMaxHeadsAtOnce && (head + count - 1) / group == kvHead);
  // Positions [first, first + n): all so far, or the sliding window's last ones.
  const int64_t seen = int64_t(batch.positions[token]) + 1;
  const int64_t first = batch.window > 0 ? std::max<int64_t>(0, seen - batch.window) : 0;
  const int64_t n = seen - first;
  // The window's K and V rows of the KV head, walked page by page once (a division per row in the
  // loops below had cost more than the arithmetic at short head dims).
  const uint8_t* const* pages = batch.pageTables[token];
  const size_t tokenBytes = kv.tokenBytes(), headOffset = size_t(kvHead) * size_t(hd) * sizeof(T);
  std::vector<const T*>& rows = rowsOf<T>(scratch);
  rows.resize(size_t(2 * n));
  const T** keyRows = rows.data();
  const T** valueRows = keyRows + n;
  for (int64_t i = 0, page = first / kv.pageTokens, slot = first % kv.pageTokens; i < n; i++) {
    keyRows[i] = reinterpret_cast<const T*>(pages[page] + size_t(slot) * tokenBytes + headOffset);
    valueRows[i] = reinterpret_cast<const T*>(pages[page] + size_t(kv.pageTokens + slot) * tokenBytes + headOffset);
    if (++slot == kv.pageTokens) {
      slot = 0;
      page++;
    }
  }
  const HeadKernels<T> k = kernelsFor<T>(isa, hd);

  scratch.scores.resize(size_t(count * n));
  for (int h = 0; h < count; h++) {
    const float* qh = q + (token * batch.heads + head + h) * hd;
    float* scores = scratch.scores.data() + h * n;
    k.scores(qh, keyRows, n, hd, scores);
    expShifted(scores, n, scaleAndMax(scores, n, batch.scale, isa), isa);
  }
  double sums[kMaxHeadsAtOnce] = {};
  scratch.accum.assign(size_t(count * hd), 0.0f);
  weightedSums<T>(
      k, hd, count, scratch.scores.data(), n, [valueRows](int64_t i) { return valueRows[i]; }, scratch.accum.data(),
      sums);
  for (int h = 0; h < count; h++) {
    float* o = out + (token * batch.heads + head + h) * hd;
    const float inv = float(1.0 / sums[h]);
    for (int i = 0; i < hd; i++) o[i] = scratch.accum[size_t(h * hd + i)] * inv;
  }
}

}  // namespace

void attendHeads(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, int count, Isa isa,
                 AttentionScratch& scratch) {
  if (batch.kv.precision == KvPrecision::kF16) {
    attend<uint16_t>(q, out, batch, token, head, count, isa, scratch);
  } else {
    attend<float>(q, out, batch, token, head, count, isa, scratch);
  }
}

}  // namespace jitllm::cpu
