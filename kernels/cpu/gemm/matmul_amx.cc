// matmulRows for CPUs with AMX-INT8 (Sapphire Rapids and later): prefill of q4_K, q6_K and q8_0
// weights on the tile unit, with the same bits as the VNNI kernels (the contract is in
// matmul_int8.inc). Decode, short batches and every other type run the VNNI / AVX-512 kernels.
//
// Why it is faster: the VNNI prefill spends one float multiply-add (plus a convert and a scale
// permute) per 4 weights and token; AMX computes a group's exact integer products for 16 rows x
// 16 tokens in two instructions (TDPBUSD / TDPBSSD, for the a and b halves of the activations),
// and what is left is the contract's one float step per group, rows x tokens at a time.
//
// Layout per call and thread: each 16-token tile's activations are transposed once into the
// tile unit's "VNNI" B layout (4 consecutive columns of a token in one dword, the 16 tokens side
// by side); each 16-row tile's weights are unpacked once into bytes (q4_K nibbles, q6_K q - 32,
// q8_0 q) and reused by every token tile. Per group: load the weight tile and the two activation
// tiles, two products into zeroed accumulators, store them, and the float step for the 16 rows
// with the 16 tokens in one vector each. The float accumulators of a row are the contract's
// lanes (g mod L): the groups are visited lane by lane, so a lane's 16 rows stay in registers.
//
// Threading: like every matmulRows variant, re-entrant on disjoint row ranges; tile state is
// per thread (configured on entry, released on exit).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/error.h"
#include "kernels/cpu/gemm/int8_activation.h"
#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/quant/blocks.h"

#if defined(__clang__)
#pragma clang attribute push(                                                                            \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")
#endif

namespace jitllm::cpu::detail {
namespace {

using quant::block_q4_K;
using quant::block_q6_K;
using quant::block_q8_0;

#include "kernels/cpu/gemm/matmul_int8.inc"

constexpr int kTile = kAmxTile;  // rows and tokens per tile (the tile unit's 16 x 16 int32 results)
// Token tiles read by one pass of the rows: about 1 MB of them (4 tiles of 8192 columns, 16 of
// 2048), so that they stay in L2 while each row tile's weights meet every one of them.
constexpr size_t kChunkBytes = size_t(1) << 20;

// The tile unit's configuration (palette 1): tile 0 the weights (16 rows x G bytes), 1 and 2 the
// activations' a and b (G/4 rows of 16 tokens x 4 bytes), 3 and 4 the products with each, and 5
// and 6 those of the next group (tileProduct's pipeline).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t colsBytes[16] = {};
  uint8_t rows[16] = {};
};

template <class K>
void configureTiles() {
  TileConfig c;
  c.rows[0] = kTile;
  c.colsBytes[0] = K::kGroup;
  for (int t : {1, 2}) {
    c.rows[t] = K::kGroup / 4;
    c.colsBytes[t] = 4 * kTile;
  }
  for (int t : {3, 4, 5, 6}) {
    c.rows[t] = kTile;
    c.colsBytes[t] = 4 * kTile;
  }
  _tile_loadconfig(&c);
}

// One token tile's activations: a and b in the tile unit's B layout, and per block of 32 columns
// S and bsum of each token (zeros for the padding tokens of a last, partial tile).
struct TokenTile {
  const int8_t* a;     // cols * 16 bytes: dword (k / 4, t) = a[t][k .. k + 3]
  const int8_t* b;     // the same for b
  const float* scale;  // cols / 32 x 16
  const float* bsum;   // cols / 32 x 16

  static TokenTile at(const uint8_t* tiles, int64_t cols, int64_t index) {
    const uint8_t* p = tiles + size_t(index) * amxTokenTileBytes(cols);
    TokenTile t;
    t.a = reinterpret_cast<const int8_t*>(p);
    t.b = reinterpret_cast<const int8_t*>(p + size_t(cols) * kTile);
    t.scale = reinterpret_cast<const float*>(p + 2 * size_t(cols) * kTile);
    t.bsum = t.scale + cols / 32 * kTile;
    return t;
  }
};

// One row tile's weights: bytes group by group (group g's 16 rows x G bytes contiguous, one tile
// load of consecutive cache lines), W_g and (q4_K) dmin*m_g per row.
struct RowTile {
  uint8_t* q;     // groups x 16 x G
  float* scales;  // 16 x groups
  float* mins;    // 16 x groups

  static size_t bytes(int64_t cols, int64_t groups) { return size_t(cols) * kTile + 2 * size_t(groups) * kTile * 4; }
  static RowTile at(uint8_t* p, int64_t cols, int64_t groups) {
    RowTile r;
    r.q = p;
    r.scales = reinterpret_cast<float*>(p + size_t(cols) * kTile);
    r.mins = r.scales + groups * kTile;
    return r;
  }
};

template <class K>
void unpackRows(const WeightView& w, int64_t r0, int64_t n, const RowTile& rt) {
  const int64_t groups = w.cols / K::kGroup;
  constexpr size_t kGroupStride = size_t(kTile) * K::kGroup;
  if (n < kTile) std::memset(rt.q, 0, size_t(w.cols) * kTile);  // padding rows: zeros, never stored
  for (int64_t i = 0; i < kTile; i++) {
    float* scales = rt.scales + i * groups;
    float* mins = rt.mins + i * groups;
    if (i < n) {
      K::unpackRow(w.data + size_t(r0 + i) * w.rowStride, w.cols, rt.q + i * K::kGroup, kGroupStride, scales, mins);
    } else {
      std::memset(scales, 0, size_t(groups) * 4);
      std::memset(mins, 0, size_t(groups) * 4);
    }
  }
}

// The contract's lane trees (sum256 / sum512 in matmul_int8.inc) on vectors of tokens.
__m512 sumLanes8(const __m512* v) {
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6])),
                       _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7])));
}
__m512 sumLanes16(const __m512* v) {
  __m512 h[8];
  for (int i = 0; i < 8; i++) h[i] = _mm512_add_ps(v[i], v[i + 8]);
  return sumLanes8(h);
}

// Group g's integer products for the row tile and the token tile into `products` (a's 16 x 16
// int32, then b's), through result tiles 3 and 4, or 5 and 6 when kSecond. (The tile intrinsics
// take their tile numbers as literals, hence the two spelled-out branches.)
template <class K, bool kSecond>
void issueGroup(const RowTile& rt, const TokenTile& tt, int64_t g, int32_t* products) {
  _tile_loadd(0, rt.q + g * K::kGroup * kTile, K::kGroup);
  _tile_loadd(1, tt.a + g * K::kGroup * kTile, 4 * kTile);
  _tile_loadd(2, tt.b + g * K::kGroup * kTile, 4 * kTile);
  int32_t* const pb = products + kTile * kTile;
  if constexpr (!kSecond) {
    _tile_zero(3);
    _tile_zero(4);
    if constexpr (K::kSignedWeights) {
      _tile_dpbssd(3, 0, 1);
      _tile_dpbssd(4, 0, 2);
    } else {
      _tile_dpbusd(3, 0, 1);
      _tile_dpbusd(4, 0, 2);
    }
    _tile_stored(3, products, 4 * kTile);
    _tile_stored(4, pb, 4 * kTile);
  } else {
    _tile_zero(5);
    _tile_zero(6);
    if constexpr (K::kSignedWeights) {
      _tile_dpbssd(5, 0, 1);
      _tile_dpbssd(6, 0, 2);
    } else {
      _tile_dpbusd(5, 0, 1);
      _tile_dpbusd(6, 0, 2);
    }
    _tile_stored(5, products, 4 * kTile);
    _tile_stored(6, pb, 4 * kTile);
  }
}

// The contract's float step for group g on the 16 rows: acc[i] (16 tokens of row i) +=
// float(256 * a-products + b-products) * (W_g of row i * S_g of each token).
template <class K>
void addGroup(const RowTile& rt, const TokenTile& tt, int64_t groups, int64_t g, const int32_t* products, __m512* acc) {
  const __m512 s = _mm512_loadu_ps(tt.scale + g * K::kGroup / 32 * kTile);
#pragma GCC unroll 16
  for (int i = 0; i < kTile; i++) {
    const __m512i pa = _mm512_load_si512(products + i * kTile);
    const __m512i pb = _mm512_load_si512(products + (kTile + i) * kTile);
    const __m512i sums = _mm512_add_epi32(_mm512_slli_epi32(pa, 8), pb);
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(rt.scales[i * groups + g]), s);
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[i]);
  }
}

// 16 rows x 16 tokens: y for rows r0 .. r0 + nRows - 1 and `tokens` tokens. `products` holds two
// groups' products (4 KB), `lanes` the float accumulators (16 rows x L lanes x 16 tokens).
template <class K>
void tileProduct(const RowTile& rt, const TokenTile& tt, int64_t tokens, int64_t cols, int64_t r0, int64_t nRows,
                 float* y, int64_t yStride, int32_t* products, float* lanes) {
  const int64_t groups = cols / K::kGroup;
  int32_t* const buffers[2] = {products, products + 2 * kTile * kTile};
  for (int lane = 0; lane < K::kLanes; lane++) {
    __m512 acc[kTile];
    for (int i = 0; i < kTile; i++) acc[i] = _mm512_setzero_ps();
    // A lane's groups in order, software-pipelined: the tile unit computes the next group (in the
    // other pair of result tiles and the other buffer) while the vector units take this one.
    int64_t g = lane;
    if (g < groups) issueGroup<K, false>(rt, tt, g, buffers[0]);
    while (g < groups) {
      const int64_t next = g + K::kLanes;
      if (next < groups) issueGroup<K, true>(rt, tt, next, buffers[1]);
      addGroup<K>(rt, tt, groups, g, buffers[0], acc);
      if (next >= groups) break;
      const int64_t after = next + K::kLanes;
      if (after < groups) issueGroup<K, false>(rt, tt, after, buffers[0]);
      addGroup<K>(rt, tt, groups, next, buffers[1], acc);
      g = after;
    }
    for (int i = 0; i < kTile; i++) _mm512_store_ps(lanes + (size_t(i) * K::kLanes + lane) * kTile, acc[i]);
  }
  alignas(64) float out[kTile];
  for (int64_t i = 0; i < nRows; i++) {
    __m512 v[K::kLanes];
    for (int lane = 0; lane < K::kLanes; lane++)
      v[lane] = _mm512_load_ps(lanes + (size_t(i) * K::kLanes + lane) * kTile);
    __m512 result = K::kLanes == 8 ? sumLanes8(v) : sumLanes16(v);
    if constexpr (std::is_same_v<K, KernelQ4_K>) {
      // Eight independent chains, each lane's groups in order (the contract's mins).
      __m512 mins[8];
      for (int lane = 0; lane < 8; lane++) mins[lane] = _mm512_setzero_ps();
      const float* m = rt.mins + i * groups;
      for (int64_t g0 = 0; g0 < groups; g0 += 8) {  // q4_K: groups is a multiple of 8
        for (int lane = 0; lane < 8; lane++) {
          mins[lane] =
              _mm512_fmadd_ps(_mm512_set1_ps(m[g0 + lane]), _mm512_loadu_ps(tt.bsum + (g0 + lane) * kTile), mins[lane]);
        }
      }
      result = _mm512_sub_ps(result, sumLanes8(mins));
    }
    _mm512_store_ps(out, result);
    for (int64_t t = 0; t < tokens; t++) y[t * yStride + r0 + i] = out[t];
  }
}

// Rows [rowBegin, rowEnd) against nTokens laid out in `tiles` (amxLayOutTokens).
template <class K>
void amxRows(const WeightView& w, const uint8_t* tiles, int64_t nTokens, float* y, int64_t yStride, int64_t rowBegin,
             int64_t rowEnd) {
  const int64_t cols = w.cols, groups = cols / K::kGroup;
  const size_t rowTileBytes = alignUp(RowTile::bytes(cols, groups));
  const size_t productBytes = 4 * kTile * kTile * 4, laneBytes = size_t(K::kLanes) * kTile * kTile * 4;
  auto* base = reinterpret_cast<uint8_t*>(threadScratch((rowTileBytes + productBytes + laneBytes + 3) / 4));
  const RowTile rows = RowTile::at(base, cols, groups);
  auto* products = reinterpret_cast<int32_t*>(base + rowTileBytes);
  auto* lanes = reinterpret_cast<float*>(base + rowTileBytes + productBytes);

  const int64_t nTiles = (nTokens + kTile - 1) / kTile;
  const int64_t chunkTiles = std::max<int64_t>(1, int64_t(kChunkBytes / amxTokenTileBytes(cols)));
  configureTiles<K>();
  for (int64_t j0 = 0; j0 < nTiles; j0 += chunkTiles) {
    const int64_t j1 = std::min(nTiles, j0 + chunkTiles);
    for (int64_t r0 = rowBegin; r0 < rowEnd; r0 += kTile) {
      const int64_t nRows = std::min<int64_t>(kTile, rowEnd - r0);
      unpackRows<K>(w, r0, nRows, rows);
      for (int64_t j = j0; j < j1; j++) {
        const int64_t tokens = std::min<int64_t>(kTile, nTokens - j * kTile);
        tileProduct<K>(rows, TokenTile::at(tiles, cols, j), tokens, cols, r0, nRows, y + j * kTile * yStride, yStride,
                       products, lanes);
      }
    }
  }
  _tile_release();
}

// Transposes 16 vectors of 16 dwords in place: r[k] lane t <- r[t] lane k.
void transpose16x16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // dword pairs
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // qword pairs
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now r[4g + c] holds, in 128-bit lane L, column 4L + c of rows 4g .. 4g + 3: exchange the
  // 128-bit lanes across the four groups.
  for (int c = 0; c < 4; c++) {
    const __m512i a = r[c], b = r[4 + c], cc = r[8 + c], d = r[12 + c];
    const __m512i ab0 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i ab1 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i cd0 = _mm512_shuffle_i32x4(cc, d, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i cd1 = _mm512_shuffle_i32x4(cc, d, _MM_SHUFFLE(3, 1, 3, 1));
    t[c] = _mm512_shuffle_i32x4(ab0, cd0, _MM_SHUFFLE(2, 0, 2, 0));       // column c
    t[4 + c] = _mm512_shuffle_i32x4(ab1, cd1, _MM_SHUFFLE(2, 0, 2, 0));   // column 4 + c
    t[8 + c] = _mm512_shuffle_i32x4(ab0, cd0, _MM_SHUFFLE(3, 1, 3, 1));   // column 8 + c
    t[12 + c] = _mm512_shuffle_i32x4(ab1, cd1, _MM_SHUFFLE(3, 1, 3, 1));  // column 12 + c
  }
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

}  // namespace

size_t amxTokenTileBytes(int64_t cols) { return alignUp(2 * size_t(cols) * kTile + 2 * size_t(cols / 32) * kTile * 4); }

void amxLayOutTokens(const float* x, int64_t xStride, int64_t nTokens, int64_t cols, uint8_t* tiles, int64_t tileBegin,
                     int64_t tileEnd) {
  const size_t rowBytes = alignUp(quantizedRowBytes(cols));
  auto* rowScratch = reinterpret_cast<uint8_t*>(threadScratch(rowBytes * kTile / 4));
  const int64_t words = cols / 4, blocks = cols / 32;
  for (int64_t j = tileBegin; j < tileEnd; j++) {
    uint8_t* p = tiles + size_t(j) * amxTokenTileBytes(cols);
    auto* a32 = reinterpret_cast<int32_t*>(p);
    auto* b32 = reinterpret_cast<int32_t*>(p + size_t(cols) * kTile);
    auto* scale = reinterpret_cast<float*>(p + 2 * size_t(cols) * kTile);
    float* bsum = scale + blocks * kTile;
    const int64_t n = std::min<int64_t>(kTile, nTokens - j * kTile);
    if (n < kTile) std::memset(p, 0, amxTokenTileBytes(cols));
    QuantizedRow q[kTile];
    for (int64_t t = 0; t < n; t++) {
      quantizeRow(x + (j * kTile + t) * xStride, cols, 0, rowScratch + size_t(t) * rowBytes);
      q[t] = layoutRow(rowScratch + size_t(t) * rowBytes, cols);
      for (int64_t i = 0; i < blocks; i++) {
        scale[i * kTile + t] = q[t].scale[i];
        bsum[i * kTile + t] = q[t].bsum[i];
      }
    }
    // Dword (word, token) of the tile = dword `word` of the token's row: 16 x 16 transposes, the
    // padding tokens' rows zeros. A last half block (cols % 64 == 32) goes one dword at a time.
    for (int half = 0; half < 2; half++) {
      auto* dst = half == 0 ? a32 : b32;
      int64_t i = 0;
      for (; i + kTile <= words; i += kTile) {
        __m512i r[kTile];
        for (int64_t t = 0; t < kTile; t++) {
          r[t] = t < n ? _mm512_loadu_si512((half == 0 ? q[t].a : q[t].b) + 4 * i) : _mm512_setzero_si512();
        }
        transpose16x16(r);
        for (int64_t k = 0; k < kTile; k++) _mm512_store_si512(dst + (i + k) * kTile, r[k]);
      }
      for (; i < words; i++) {
        for (int64_t t = 0; t < n; t++) {
          int32_t v;
          std::memcpy(&v, (half == 0 ? q[t].a : q[t].b) + 4 * i, 4);
          dst[i * kTile + t] = v;
        }
      }
    }
  }
}

bool amxMultiplies(quant::TensorType type) {
  using quant::TensorType;
  return type == TensorType::kQ4_K || type == TensorType::kQ6_K || type == TensorType::kQ8_0;
}

void matmulRowsAmxPrepared(const WeightView& w, const uint8_t* tiles, int64_t nTokens, float* y, int64_t yStride,
                           int64_t rowBegin, int64_t rowEnd) {
  using quant::TensorType;
  switch (w.type) {
    case TensorType::kQ4_K:
      return amxRows<KernelQ4_K>(w, tiles, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ6_K:
      return amxRows<KernelQ6_K>(w, tiles, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ8_0:
      return amxRows<KernelQ8_0>(w, tiles, nTokens, y, yStride, rowBegin, rowEnd);
    default:
      JITLLM_FAIL(kFailed, "matmul: AMX kernels do not multiply ", quant::typeName(w.type));
  }
}

void matmulRowsAvx512Amx(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                         int64_t yStride, int64_t rowBegin, int64_t rowEnd) {
  if (nTokens < kAmxMinTokens || !amxMultiplies(w.type)) {
    return matmulRowsAvx512Vnni(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
  // Unprepared (a caller without a PreparedActivations): this thread lays the tokens out itself,
  // into a PreparedActivations of its own (threadScratch is the kernels').
  thread_local PreparedActivations prepared;
  prepared.layOut(x, xStride, 0, prepared.reset(nTokens, w.cols));
  matmulRowsAmxPrepared(w, prepared.tiles(), nTokens, y, yStride, rowBegin, rowEnd);
}

}  // namespace jitllm::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
