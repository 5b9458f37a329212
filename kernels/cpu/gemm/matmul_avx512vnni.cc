// matmulRows for AVX-512 with VNNI: integer dot products (vpdpbusd) for q4_K, q6_K and q8_0.
//
// Activations are quantized on the fly, per token row and per block of 32, into two int8
// vectors: x ~= s * (a + b / 256), s a power of two with |x| / s <= 127, a = round(x / s) and
// b = round(256 * (x / s - a)) (clamped to +-127, which only touches residuals of exactly 1/2).
// That keeps about 15 significant bits per block (llama.cpp's q8 activations keep 8), and every
// step before the integer products is exact (power-of-two scaling, exact residuals), so the
// error is the rounding of b alone: at most s / 512 per element.
//
// The weights stay in their GGUF blocks (no repacking, no second copy). For 64 weights q (as
// unsigned bytes, with the type's offset o: q4_K 0, q6_K 32, q8_0 128 after flipping the sign
// bit) and the activations' a, b:
//   L = 256 * dpbusd(q, a) + dpbusd(q, b) - o * sum4(256 a + b)       (16 int32 lanes, exact)
// where each lane covers 4 consecutive elements and the last term is precomputed per token.
// L is converted to float and multiplied by a per-lane scale (weight sub-block scale times s/256)
// into one float accumulator per row; q4_K's mins go through the exact per-block sums of the
// represented activations. Everything per (row, token) happens in one fixed order that depends
// on neither the row range nor the number of tokens, so prefill and decode give the same bits.
//
// Other weight types run the plain AVX-512 kernels (float activations).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/quant/blocks.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
#endif

namespace jitllm::cpu::detail {
namespace {

using quant::block_q4_K;
using quant::block_q6_K;
using quant::block_q8_0;

// Tokens quantized together; their int8 activations (about 4 bytes per column and token) stay in
// L2 while every row of the thread's range passes over them.
constexpr int64_t kTokenBlock = 16;
// Decode rows computed together, sharing each activation load: kRowTile for matrices in the
// caches, one for those that stream from memory (WeightView::streamed). A thread reading its rows
// one after the other makes one sequential stream, which the prefetches below and the hardware
// keep ahead of; in the caches, sharing the activation loads is what counts. Measured on 2
// threads (jitllm-bench -p 0, decode tok/s; 1B Q4_K_M, 807 MB, and the tiny Q4_K_M, 15 MB):
// 4 rows everywhere 14.3 / 2875, 2 rows 18.2 / 2469, one row 20.6 / 2417; by matrix size instead
// of by the weights' total (4 rows below 1, 2, 8 and 64 MB, one above) 20.6 / 2598, 21.3 / 2625,
// 19.1 / 2806 and 15.1 / 2722: the tiny model's 6.7 MB head is in the caches, the 1B's 2.4 MB
// matrices are not.
constexpr int kRowTile = 4;
// Prefill tiles (each kernel's kTileRows x kTileTokens): rows x tokens sharing each weight
// extraction (rows) and activation load (tokens), their float accumulators and the extracted
// weights within the 32 vector registers. Sizes measured with matmul_microbench (2x4, 4x4, 2x8,
// 1x8): 2x8 for the K-quants, 2x4 for q8_0, whose extraction is cheap.

float halfAt(const uint16_t& h) { return _cvtsh_ss(h); }

// One token's activations in the integer form above, for `cols` columns (a multiple of 32).
struct QuantizedRow {
  const int8_t* a;      // cols
  const int8_t* b;      // cols
  const int32_t* bias;  // cols / 4: -o * sum over each 4 elements of (256 a + b); only if o != 0
  const float* lscale;  // cols / 4: s / 256 of the block each 4-element lane belongs to
  const float* bsum;    // cols / 32: s / 256 * sum of (256 a + b) over the block
};

size_t alignUp(size_t n) { return (n + 63) / 64 * 64; }

// Bytes of one token's QuantizedRow.
size_t quantizedRowBytes(int64_t cols) {
  const size_t c = size_t(cols);
  return 2 * alignUp(c) + 2 * alignUp(c) + alignUp(c / 8);
}

QuantizedRow layoutRow(uint8_t* p, int64_t cols) {
  const size_t c = size_t(cols);
  QuantizedRow q;
  q.a = reinterpret_cast<int8_t*>(p);
  q.b = reinterpret_cast<int8_t*>(p + alignUp(c));
  q.bias = reinterpret_cast<int32_t*>(p + 2 * alignUp(c));
  q.lscale = reinterpret_cast<float*>(p + 3 * alignUp(c));
  q.bsum = reinterpret_cast<float*>(p + 4 * alignUp(c));
  return q;
}

// Quantizes one token (cols a multiple of 32) into the layout at p; offset o as above.
void quantizeRow(const float* x, int64_t cols, int offset, uint8_t* p) {
  const QuantizedRow q = layoutRow(p, cols);
  auto* a = const_cast<int8_t*>(q.a);
  auto* b = const_cast<int8_t*>(q.b);
  auto* bias = const_cast<int32_t*>(q.bias);
  auto* lscale = const_cast<float*>(q.lscale);
  auto* bsum = const_cast<float*>(q.bsum);
  const __m512 absMask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
  for (int64_t j = 0; j < cols / 32; j++) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * j), x1 = _mm512_loadu_ps(x + 32 * j + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, absMask), _mm512_and_ps(x1, absMask)));
    int e = 0;
    if (amax > 0 && std::isfinite(amax)) {
      int exponent;
      std::frexp(amax, &exponent);  // amax = m * 2^exponent, m in [0.5, 1)
      e = exponent - 7;             // amax / 2^e in [64, 128)
      if (amax > std::ldexp(127.0f, e)) e++;
    }
    const __m512 inv = _mm512_set1_ps(std::ldexp(1.0f, -e));
    const __m512 v0 = _mm512_mul_ps(x0, inv), v1 = _mm512_mul_ps(x1, inv);
    const __m512i a0 = _mm512_cvtps_epi32(v0), a1 = _mm512_cvtps_epi32(v1);
    const __m512 k256 = _mm512_set1_ps(256.0f);
    __m512i b0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(v0, _mm512_cvtepi32_ps(a0)), k256));
    __m512i b1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(v1, _mm512_cvtepi32_ps(a1)), k256));
    b0 = _mm512_max_epi32(_mm512_min_epi32(b0, lim), nlim);
    b1 = _mm512_max_epi32(_mm512_min_epi32(b1, lim), nlim);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + 32 * j), _mm512_cvtepi32_epi8(a0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + 32 * j + 16), _mm512_cvtepi32_epi8(a1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 32 * j), _mm512_cvtepi32_epi8(b0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 32 * j + 16), _mm512_cvtepi32_epi8(b1));
    // 256 a + b per element; their block sum (|sum| < 2^21) converts to float exactly.
    const __m512i i0 = _mm512_add_epi32(_mm512_slli_epi32(a0, 8), b0);
    const __m512i i1 = _mm512_add_epi32(_mm512_slli_epi32(a1, 8), b1);
    const float s256 = std::ldexp(1.0f, e - 8);
    bsum[j] = s256 * float(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1)));
    if (!std::isfinite(amax)) bsum[j] = amax;  // propagate inf / nan into every result
    _mm256_storeu_ps(lscale + 8 * j, _mm256_set1_ps(std::isfinite(amax) ? s256 : amax));
    if (offset != 0) {
      // Sums of 4 consecutive lanes: vpdpbusd with ones does exactly that on bytes.
      const __m512i ones = _mm512_set1_epi8(1);
      const __m256i aa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * j));
      const __m256i bb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * j));
      const __m256i sa = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(ones), aa);
      const __m256i sb = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(ones), bb);
      const __m256i sum4 = _mm256_add_epi32(_mm256_slli_epi32(sa, 8), sb);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + 8 * j),
                          _mm256_mullo_epi32(sum4, _mm256_set1_epi32(-offset)));
    }
  }
}

// L for 64 weights w (bytes) against the activations at element k, plus the type's bias.
template <bool kBias>
__m512i dot64(__m512i w, const QuantizedRow& x, int64_t k) {
  const __m512i a = _mm512_loadu_si512(x.a + k), b = _mm512_loadu_si512(x.b + k);
  __m512i init = _mm512_setzero_si512();
  if constexpr (kBias) init = _mm512_loadu_si512(x.bias + k / 4);
  const __m512i qa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, a);
  const __m512i qb = _mm512_dpbusd_epi32(init, w, b);
  return _mm512_add_epi32(_mm512_slli_epi32(qa, 8), qb);
}

float sum512(__m512 r) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(r), _mm512_extractf32x8_ps(r, 1));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

float sum256(__m256 h) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// --- q4_K: 8 sub-blocks of 32, w = d * sc * q - dmin * m, q in 0..15.
struct KernelQ4_K {
  static constexpr int kOffset = 0;
  static constexpr size_t kPrefetchBytes = 4096;  // decode's distance ahead (dotRows)
  static constexpr int kTileRows = 2, kTileTokens = 8;
  static constexpr int64_t kUnit = quant::kQK_K;
  static constexpr size_t kUnitBytes = sizeof(block_q4_K);
  // Plain members, zeroed by start(): GCC does not compile implicit constructors for the
  // target of this file.
  struct State {
    __m512 acc;
    __m256 mins;
  };
  static void start(State& st) {
    st.acc = _mm512_setzero_ps();
    st.mins = _mm256_setzero_ps();
  }
  // 8 scales d*sc, then 8 mins dmin*m.
  static __m512 scalesAndMins(const block_q4_K* blk) {
    alignas(16) uint8_t raw[16];
    quant::unpackScalesMinsK4(blk->scales, raw);
    const __m512 values =
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(raw))));
    const __m512 factors = _mm512_insertf32x8(_mm512_set1_ps(halfAt(blk->d)), _mm256_set1_ps(halfAt(blk->dmin)), 1);
    return _mm512_mul_ps(values, factors);
  }
  // Byte lanes 0..31 take the low nibbles of 32 bytes, lanes 32..63 their high nibbles: sub-blocks
  // 2p and 2p+1 in element order.
  static __m512i pairWeights(const block_q4_K* blk, int pair) {
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i raw32 =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * pair)));
    return _mm512_and_si512(_mm512_srlv_epi16(raw32, shifts), _mm512_set1_epi8(0x0F));
  }
  static void addMins(__m512 products, const QuantizedRow& x, int64_t k, State& st) {
    st.mins = _mm256_fmadd_ps(_mm512_extractf32x8_ps(products, 1), _mm256_loadu_ps(x.bsum + k / 32), st.mins);
  }
  static void addPair(__m512i w, __m512 products, int pair, const QuantizedRow& x, int64_t k, State& st) {
    const __m512i l = dot64<false>(w, x, k + 64 * pair);
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi32(2 * pair), _mm256_set1_epi32(2 * pair + 1), 1);
    const __m512 scale =
        _mm512_mul_ps(_mm512_permutexvar_ps(idx, products), _mm512_loadu_ps(x.lscale + (k + 64 * pair) / 4));
    st.acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l), scale, st.acc);
  }
  // One token (decode): each pair's weights are used as soon as they are extracted.
  static void unit(const uint8_t* p, const QuantizedRow& x, int64_t k, State& st) {
    const auto* blk = reinterpret_cast<const block_q4_K*>(p);
    const __m512 products = scalesAndMins(blk);
    addMins(products, x, k, st);
    for (int pair = 0; pair < 4; pair++) addPair(pairWeights(blk, pair), products, pair, x, k, st);
  }
  // Several tokens (dotTile): the weights extracted once, then each token the same operations in
  // the same order as unit().
  struct Unpacked {
    __m512 products;
    __m512i w[4];
  };
  static void unpack(const uint8_t* p, Unpacked& u) {
    const auto* blk = reinterpret_cast<const block_q4_K*>(p);
    u.products = scalesAndMins(blk);
    for (int pair = 0; pair < 4; pair++) u.w[pair] = pairWeights(blk, pair);
  }
  static void apply(const Unpacked& u, const QuantizedRow& x, int64_t k, State& st) {
    addMins(u.products, x, k, st);
    for (int pair = 0; pair < 4; pair++) addPair(u.w[pair], u.products, pair, x, k, st);
  }
  static float finish(const State& st) { return sum512(st.acc) - sum256(st.mins); }
};

// --- q6_K: 16 sub-blocks of 16, w = d * sc * (q - 32), q in 0..63.
struct KernelQ6_K {
  static constexpr int kOffset = 32;
  static constexpr size_t kPrefetchBytes = 4096;
  static constexpr int kTileRows = 2, kTileTokens = 8;
  static constexpr int64_t kUnit = quant::kQK_K;
  static constexpr size_t kUnitBytes = sizeof(block_q6_K);
  struct State {
    __m512 acc;
  };
  static void start(State& st) { st.acc = _mm512_setzero_ps(); }
  // d * sc of the 16 sub-blocks.
  static __m512 blockScales(const block_q6_K* blk) {
    return _mm512_mul_ps(
        _mm512_set1_ps(halfAt(blk->d)),
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)))));
  }
  // Elements 128 half .. +127 as bytes q in 0..63: the first 64 in w01, the next 64 in w23.
  static void halfWeights(const block_q6_K* blk, int half, __m512i& w01, __m512i& w23) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const auto* ql = reinterpret_cast<const __m256i*>(blk->ql + 64 * half);
    const __m256i l0 = _mm256_loadu_si256(ql), l1 = _mm256_loadu_si256(ql + 1);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * half));
    const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
    const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
    const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, bits45));
    const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                       _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
    w01 = _mm512_inserti64x4(_mm512_castsi256_si512(q1), q2, 1);
    w23 = _mm512_inserti64x4(_mm512_castsi256_si512(q3), q4, 1);
  }
  // The 64 elements 128 half + 64 c .. +63 (weights w) of one token.
  static void addChunk(__m512i w, __m512 scales, int half, int c, const QuantizedRow& x, int64_t k, State& st) {
    // Lane j of 64 elements c..c+63 belongs to sub-block 4c/64 + j/4.
    const __m512i lanes = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
    const int64_t kk = k + 128 * half + 64 * c;
    const __m512i l = dot64<true>(w, x, kk);
    const __m512i idx = _mm512_add_epi32(lanes, _mm512_set1_epi32(8 * half + 4 * c));
    const __m512 scale = _mm512_mul_ps(_mm512_permutexvar_ps(idx, scales), _mm512_loadu_ps(x.lscale + kk / 4));
    st.acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l), scale, st.acc);
  }
  // One token (decode): each half's weights are used as soon as they are extracted.
  static void unit(const uint8_t* p, const QuantizedRow& x, int64_t k, State& st) {
    const auto* blk = reinterpret_cast<const block_q6_K*>(p);
    const __m512 scales = blockScales(blk);
    for (int half = 0; half < 2; half++) {
      __m512i w01, w23;
      halfWeights(blk, half, w01, w23);
      addChunk(w01, scales, half, 0, x, k, st);
      addChunk(w23, scales, half, 1, x, k, st);
    }
  }
  // Several tokens (dotTile): the weights extracted once, then each token the same operations in
  // the same order as unit().
  struct Unpacked {
    __m512 scales;
    __m512i w[4];  // elements 64i .. 64i + 63
  };
  static void unpack(const uint8_t* p, Unpacked& u) {
    const auto* blk = reinterpret_cast<const block_q6_K*>(p);
    u.scales = blockScales(blk);
    for (int half = 0; half < 2; half++) halfWeights(blk, half, u.w[2 * half], u.w[2 * half + 1]);
  }
  static void apply(const Unpacked& u, const QuantizedRow& x, int64_t k, State& st) {
    for (int half = 0; half < 2; half++) {
      for (int c = 0; c < 2; c++) addChunk(u.w[2 * half + c], u.scales, half, c, x, k, st);
    }
  }
  static float finish(const State& st) { return sum512(st.acc); }
};

// --- q8_0: blocks of 32, w = d * q, q in -128..127 (flipped to q + 128 as a byte). Two blocks
// per unit; a row of an odd number of blocks ends in a half unit whose upper lanes are zero.
struct KernelQ8_0 {
  static constexpr int kOffset = 128;
  static constexpr size_t kPrefetchBytes = 2048;
  static constexpr int kTileRows = 2, kTileTokens = 4;
  static constexpr int64_t kUnit = 64;
  static constexpr size_t kUnitBytes = 2 * sizeof(block_q8_0);
  struct State {
    __m512 acc;
  };
  static void start(State& st) { st.acc = _mm512_setzero_ps(); }
  struct Unpacked {
    __m512i w;  // 64 bytes q + 128
    __m512 d;   // each block's d over its 8 lanes
  };
  static void unpack(const uint8_t* p, Unpacked& u) {
    const auto* blk = reinterpret_cast<const block_q8_0*>(p);
    const __m512i q =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs)), 1);
    u.w = _mm512_xor_si512(q, _mm512_set1_epi8(int8_t(0x80)));
    u.d = _mm512_insertf32x8(_mm512_set1_ps(halfAt(blk[0].d)), _mm256_set1_ps(halfAt(blk[1].d)), 1);
  }
  static void apply(const Unpacked& u, const QuantizedRow& x, int64_t k, State& st) {
    const __m512i l = dot64<true>(u.w, x, k);
    st.acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l), _mm512_mul_ps(u.d, _mm512_loadu_ps(x.lscale + k / 4)), st.acc);
  }
  static void unit(const uint8_t* p, const QuantizedRow& x, int64_t k, State& st) {
    Unpacked u;
    unpack(p, u);
    apply(u, x, k, st);
  }
  // The last 32 elements of a row with an odd block count.
  static void halfUnit(const uint8_t* p, const QuantizedRow& x, int64_t k, State& st) {
    const auto* blk = reinterpret_cast<const block_q8_0*>(p);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
    const __m256i w = _mm256_xor_si256(q, _mm256_set1_epi8(int8_t(0x80)));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.a + k));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.b + k));
    const __m256i qa = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);
    const __m256i qb = _mm256_dpbusd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bias + k / 4)), w, b);
    const __m256i l = _mm256_add_epi32(_mm256_slli_epi32(qa, 8), qb);
    const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(halfAt(blk[0].d)), _mm256_loadu_ps(x.lscale + k / 4));
    // Lanes 8..15 of the accumulator get exact zeros added, as if the unit were whole.
    st.acc = _mm512_add_ps(st.acc, _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(l), scale)));
  }
  static float finish(const State& st) { return sum512(st.acc); }
};

// NR rows against one quantized token.
template <class K, int NR>
void dotRows(const WeightView& w, int64_t r, const QuantizedRow& xRow, float* y, int64_t yStep) {
  const QuantizedRow x = xRow;  // a local copy: its pointers stay in registers
  typename K::State st[NR];
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; i++) {
    K::start(st[i]);
    rows[i] = w.data + size_t(r + i) * w.rowStride;
  }
  const int64_t units = w.cols / K::kUnit;
  // Decode streams the weights once from memory: every cache line of each row about 4 KB ahead
  // is requested into L2 (prefetcht1: L2's own request queue, leaving L1's line fill buffers,
  // which the hardware's L1 prefetcher fills from L2, to the loads). Measured end to end on 2
  // threads (jitllm-bench 1B, -p 0 -n 32, alternating binaries; docs/cpu-kernels.md): one line per
  // unit 576 bytes ahead into L1 and 4 rows at a time gave q4_K_M 13.1, q6_K 14.2, q8_0 15.5 tok/s;
  // every line 2 KB ahead into L1 with streamed rows one at a time 21.6, 24.1, 21.4 (1.2-3 KB within
  // 3 %, 4.6 KB 10 % slower); then, on a slower hour, into L2 at 4 KB q4_K_M 20.2 -> 24.6,
  // q6_K 21.0 -> 23.4, q8_0 14.8 -> 15.1 (at 2 KB 23.3, 21.3, 15.8; at 1 KB 20.5 and 14.1): hence
  // each kernel's kPrefetchBytes. Rows are contiguous, so near a row's end this fetches the start
  // of the next.
  constexpr size_t kAhead = std::max<size_t>(1, K::kPrefetchBytes / K::kUnitBytes) * K::kUnitBytes;
  for (int64_t u = 0; u < units; u++) {
    for (int i = 0; i < NR; i++) {
      const char* ahead = reinterpret_cast<const char*>(rows[i] + size_t(u) * K::kUnitBytes + kAhead);
      for (size_t line = 0; line < K::kUnitBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
      K::unit(rows[i] + size_t(u) * K::kUnitBytes, x, u * K::kUnit, st[i]);
    }
  }
  if constexpr (std::is_same_v<K, KernelQ8_0>) {
    if (w.cols % K::kUnit != 0) {
      for (int i = 0; i < NR; i++) K::halfUnit(rows[i] + size_t(units) * K::kUnitBytes, x, units * K::kUnit, st[i]);
    }
  }
  for (int i = 0; i < NR; i++) y[(r + i) * yStep] = K::finish(st[i]);
}

// NR rows against NT quantized tokens: each unit's weights are extracted once per row and used by
// every token. Per (row, token) the operations and their order are dotRows' exactly, so a
// token's result has the same bits in a tile as alone.
template <class K, int NR, int NT>
void dotTile(const WeightView& w, int64_t r, const QuantizedRow* xsIn, float* y, int64_t yStride) {
  QuantizedRow xs[NT];  // local copies: their pointers stay in registers
  for (int j = 0; j < NT; j++) xs[j] = xsIn[j];
  typename K::State st[NR][NT];
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; i++) {
    for (int j = 0; j < NT; j++) K::start(st[i][j]);
    rows[i] = w.data + size_t(r + i) * w.rowStride;
  }
  const int64_t units = w.cols / K::kUnit;
  for (int64_t u = 0; u < units; u++) {
    for (int i = 0; i < NR; i++) {
      typename K::Unpacked up;
      K::unpack(rows[i] + size_t(u) * K::kUnitBytes, up);
      for (int j = 0; j < NT; j++) K::apply(up, xs[j], u * K::kUnit, st[i][j]);
    }
  }
  if constexpr (std::is_same_v<K, KernelQ8_0>) {
    if (w.cols % K::kUnit != 0) {
      for (int i = 0; i < NR; i++) {
        for (int j = 0; j < NT; j++)
          K::halfUnit(rows[i] + size_t(units) * K::kUnitBytes, xs[j], units * K::kUnit, st[i][j]);
      }
    }
  }
  for (int i = 0; i < NR; i++) {
    for (int j = 0; j < NT; j++) y[j * yStride + r + i] = K::finish(st[i][j]);
  }
}

template <class K>
void vnniRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
              int64_t rowBegin, int64_t rowEnd) {
  const size_t rowBytes = quantizedRowBytes(w.cols);
  const int64_t blockTokens = std::min(nTokens, kTokenBlock);
  auto* scratch = reinterpret_cast<uint8_t*>(threadScratch((rowBytes * size_t(blockTokens) + 3) / 4));
  for (int64_t t0 = 0; t0 < nTokens; t0 += kTokenBlock) {
    const int64_t nt = std::min(kTokenBlock, nTokens - t0);
    for (int64_t t = 0; t < nt; t++)
      quantizeRow(x + (t0 + t) * xStride, w.cols, K::kOffset, scratch + size_t(t) * rowBytes);
    int64_t r = rowBegin;
    QuantizedRow xs[kTokenBlock];
    for (int64_t t = 0; t < nt; t++) xs[t] = layoutRow(scratch + size_t(t) * rowBytes, w.cols);
    // Prefill: tiles of K::kTileRows rows x K::kTileTokens tokens; the tokens left over, and decode, take
    // the rows kRowTile at a time.
    const int64_t tiled = nt / K::kTileTokens * K::kTileTokens;
    if (tiled > 0) {
      for (; r + K::kTileRows <= rowEnd; r += K::kTileRows) {
        for (int64_t t = 0; t < tiled; t += K::kTileTokens) {
          dotTile<K, K::kTileRows, K::kTileTokens>(w, r, xs + t, y + (t0 + t) * yStride, yStride);
        }
        for (int64_t t = tiled; t < nt; t++) dotRows<K, K::kTileRows>(w, r, xs[t], y + (t0 + t) * yStride, 1);
      }
    }
    if (!w.streamed) {
      for (; r + kRowTile <= rowEnd; r += kRowTile) {
        for (int64_t t = 0; t < nt; t++) dotRows<K, kRowTile>(w, r, xs[t], y + (t0 + t) * yStride, 1);
      }
    }
    for (; r < rowEnd; r++) {
      for (int64_t t = 0; t < nt; t++) dotRows<K, 1>(w, r, xs[t], y + (t0 + t) * yStride, 1);
    }
  }
}

}  // namespace

void matmulRowsAvx512Vnni(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                          int64_t yStride, int64_t rowBegin, int64_t rowEnd) {
  using quant::TensorType;
  switch (w.type) {
    case TensorType::kQ4_K:
      return vnniRows<KernelQ4_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ6_K:
      return vnniRows<KernelQ6_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ8_0:
      return vnniRows<KernelQ8_0>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    default:
      return matmulRowsAvx512(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
}

}  // namespace jitllm::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
