// matmulRows for Isa::kAvx512Bf16 (and kAvx512Amx): BF16 weights on vdpbf16ps; every other type
// is kAvx512Vnni's.
//
// The float path widens each bf16 weight to f32 (two instructions per 16 weights) before its
// FMA. vdpbf16ps multiplies 32 bf16 weights as they lie in the file against 32 bf16 activations
// and adds the pairs into 16 f32 lanes, one instruction. Activations in bf16 alone keep 8 bits
// (llama.cpp's choice; its products then sit ~1e-5 NMSE from the truth), so each is split in
// two bf16 halves, hi = bf16(x) and lo = bf16(x - hi) (the difference is exact in f32): about 16
// bits, the precision class of the integer kernels' ~15-bit activations. The products of bf16
// values are exact in f32, so the only rounding is the accumulation.
//
// The contract (the bits of this Isa; batch and row split never change them): for row r and
// token t, two accumulators of 16 lanes start at +0; for each 32-column chunk c in increasing
// order, hiAcc = vdpbf16ps(hiAcc, W[c], hi[c]) and loAcc = vdpbf16ps(loAcc, W[c], lo[c]); columns
// past the end count as zero weights; the result is the fixed reduction tree over hiAcc + loAcc.
// vdpbf16ps flushes denormal inputs and results to zero (DAZ/FTZ whatever MXCSR says): an
// activation below ~1e-38 counts as 0. An infinite activation keeps lo = 0, so the result is the
// float path's inf (or NaN) rather than inf - inf.
//
// Compiled for AVX-512 BF16 through a target pragma; matmul.cc calls in only after
// isaSupported(Isa::kAvx512Bf16).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm/matmul_variants.h"

#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,fma,f16c")
#endif

namespace jitllm::cpu::detail {
namespace {

constexpr int64_t kChunk = 32;  // bf16 elements per vdpbf16ps
// Decode: rows computed together, each with its two accumulators (16 registers), sharing the
// activation loads; prefill: rows x tokens sharing the weight loads (4 x 3 x 2 accumulators, 4
// weight vectors and one activation vector within the 32 registers).
constexpr int kDecodeRows = 8;
constexpr int kTileRows = 4;
constexpr int kTileTokens = 3;

__m512bh asBf16(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

__m512bh loadWeights(const uint8_t* p) { return asBf16(_mm512_loadu_si512(p)); }
__m512bh loadWeightsPartial(const uint8_t* p, int n) {
  return asBf16(_mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << n) - 1), p));
}

// The fixed reduction tree of the AVX-512 float kernels (Avx512Vec::sum).
float sum16(__m512 r) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(r), _mm512_extractf32x8_ps(r, 1));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// One token's activations as bf16 halves, each padded with zeros to whole chunks.
struct SplitToken {
  const uint16_t* hi;
  const uint16_t* lo;
};

// Splits 16 floats into their hi and lo bf16 halves.
void splitSixteen(__m512 x, uint16_t* hi, uint16_t* lo) {
  __m256bh hb = _mm512_cvtneps_pbh(x);
  const __m256i h = reinterpret_cast<__m256i&>(hb);
  const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  // x - hi is exact; it is NaN only where x is infinite (inf - inf) or NaN, and hi carries both.
  const __m512 rest = _mm512_sub_ps(x, hf);
  const __m512 lof = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(rest, rest, _CMP_ORD_Q), rest);
  __m256bh lb = _mm512_cvtneps_pbh(lof);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), h);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), reinterpret_cast<__m256i&>(lb));
}

// Splits nTokens rows of x into `out` (2 * padded uint16 per token: hi then lo).
void splitTokens(const float* x, int64_t xStride, int64_t nTokens, int64_t cols, int64_t padded, uint16_t* out) {
  for (int64_t t = 0; t < nTokens; t++) {
    const float* xt = x + t * xStride;
    uint16_t* hi = out + 2 * t * padded;
    uint16_t* lo = hi + padded;
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) splitSixteen(_mm512_loadu_ps(xt + k), hi + k, lo + k);
    if (k < cols) {
      splitSixteen(_mm512_maskz_loadu_ps(__mmask16((1u << (cols - k)) - 1), xt + k), hi + k, lo + k);
      k += 16;
    }
    for (; k < padded; k += 16) splitSixteen(_mm512_setzero_ps(), hi + k, lo + k);
  }
}

// NR rows x NT tokens, each (row, token) in the contract's order.
template <int NR, int NT>
void tile(const WeightView& w, int64_t r, const SplitToken* xs, float* y, int64_t yStride) {
  __m512 hiAcc[NR][NT], loAcc[NR][NT];
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; i++) {
    rows[i] = w.data + size_t(r + i) * w.rowStride;
    for (int t = 0; t < NT; t++) hiAcc[i][t] = loAcc[i][t] = _mm512_setzero_ps();
  }
  const int64_t whole = w.cols / kChunk * kChunk;
  auto step = [&](int64_t k, const __m512bh(&wv)[NR]) {
    for (int t = 0; t < NT; t++) {
      const __m512bh hi = asBf16(_mm512_loadu_si512(xs[t].hi + k));
      for (int i = 0; i < NR; i++) hiAcc[i][t] = _mm512_dpbf16_ps(hiAcc[i][t], wv[i], hi);
      const __m512bh lo = asBf16(_mm512_loadu_si512(xs[t].lo + k));
      for (int i = 0; i < NR; i++) loAcc[i][t] = _mm512_dpbf16_ps(loAcc[i][t], wv[i], lo);
    }
  };
  for (int64_t k = 0; k < whole; k += kChunk) {
    __m512bh wv[NR];
    for (int i = 0; i < NR; i++) wv[i] = loadWeights(rows[i] + 2 * k);
    step(k, wv);
  }
  if (whole < w.cols) {
    __m512bh wv[NR];
    for (int i = 0; i < NR; i++) wv[i] = loadWeightsPartial(rows[i] + 2 * whole, int(w.cols - whole));
    step(whole, wv);
  }
  for (int t = 0; t < NT; t++) {
    for (int i = 0; i < NR; i++) y[t * yStride + r + i] = sum16(_mm512_add_ps(hiAcc[i][t], loAcc[i][t]));
  }
}

template <int NR>
void tokensOfRows(const WeightView& w, int64_t r, const SplitToken* xs, int64_t nTokens, float* y, int64_t yStride) {
  int64_t t = 0;
  for (; t + kTileTokens <= nTokens; t += kTileTokens) tile<NR, kTileTokens>(w, r, xs + t, y + t * yStride, yStride);
  for (; t + 2 <= nTokens; t += 2) tile<NR, 2>(w, r, xs + t, y + t * yStride, yStride);
  for (; t < nTokens; t++) tile<NR, 1>(w, r, xs + t, y + t * yStride, yStride);
}

void bf16Rows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
              int64_t rowBegin, int64_t rowEnd) {
  const int64_t padded = (w.cols + kChunk - 1) / kChunk * kChunk;
  // Tokens go through in groups whose split activations (4 bytes a column) stay in L2 while
  // every row passes.
  constexpr int64_t kTokenGroup = 48, kGroupBytes = 256 << 10;
  const int64_t group = std::min({nTokens, kTokenGroup, std::max<int64_t>(kTileTokens, kGroupBytes / (4 * padded))});
  auto* split = reinterpret_cast<uint16_t*>(threadScratch(size_t(group * padded)));  // 2 halves x 2 bytes
  SplitToken xs[kTokenGroup];
  for (int64_t t0 = 0; t0 < nTokens; t0 += group) {
    const int64_t nt = std::min(group, nTokens - t0);
    splitTokens(x + t0 * xStride, xStride, nt, w.cols, padded, split);
    for (int64_t t = 0; t < nt; t++) xs[t] = {split + 2 * t * padded, split + 2 * t * padded + padded};
    float* yt = y + t0 * yStride;
    int64_t r = rowBegin;
    if (nt == 1) {
      for (; r + kDecodeRows <= rowEnd; r += kDecodeRows) tile<kDecodeRows, 1>(w, r, xs, yt, yStride);
    }
    for (; r + kTileRows <= rowEnd; r += kTileRows) tokensOfRows<kTileRows>(w, r, xs, nt, yt, yStride);
    for (; r < rowEnd; r++) tokensOfRows<1>(w, r, xs, nt, yt, yStride);
  }
}

}  // namespace

void matmulRowsAvx512Bf16(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                          int64_t yStride, int64_t rowBegin, int64_t rowEnd) {
  if (w.type != quant::TensorType::kBF16) {
    return matmulRowsAvx512Vnni(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
  bf16Rows(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
}

}  // namespace jitllm::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
