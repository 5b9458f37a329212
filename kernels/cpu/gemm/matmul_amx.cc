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
#include <type_traits>

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

constexpr int kTile = 16;  // rows and tokens per tile (the tile unit's 16 x 16 int32 results)
// Batches of fewer tokens take the VNNI kernels: a padded tile's products cost the same as a
// full one's. Measured with matmul_microbench (docs/cpu-kernels.md).
constexpr int64_t kMinTokens = 8;
// Token tiles whose activations are laid out before the rows pass over them: 64 tokens of a
// 8192-column matrix are 2 MB of tiles, about what L2 holds.
constexpr int64_t kChunkTiles = 4;

// The tile unit's configuration (palette 1): tile 0 the weights (16 rows x G bytes), 1 and 2 the
// activations' a and b (G/4 rows of 16 tokens x 4 bytes), 3 and 4 the products with each.
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
  for (int t : {3, 4}) {
    c.rows[t] = kTile;
    c.colsBytes[t] = 4 * kTile;
  }
  _tile_loadconfig(&c);
}

// One token tile's activations: a and b in the B layout, S_g and (q4_K) bsum_g per token.
struct TokenTile {
  int8_t* a;   // cols * 16 bytes: dword (k / 4, t) = a[t][k .. k + 3]
  int8_t* b;   // the same for b
  float* s;    // groups x 16: S_g of each token (0 for padding tokens)
  float* sum;  // cols / 32 x 16: bsum of each block and token
  int64_t tokens;

  static size_t bytes(int64_t cols, int64_t groups) {
    return 2 * size_t(cols) * kTile + size_t(groups) * kTile * 4 + size_t(cols / 32) * kTile * 4;
  }
  static TokenTile at(uint8_t* p, int64_t cols, int64_t groups) {
    TokenTile t;
    t.a = reinterpret_cast<int8_t*>(p);
    t.b = reinterpret_cast<int8_t*>(p + size_t(cols) * kTile);
    t.s = reinterpret_cast<float*>(p + 2 * size_t(cols) * kTile);
    t.sum = reinterpret_cast<float*>(p + 2 * size_t(cols) * kTile + size_t(groups) * kTile * 4);
    return t;
  }
};

// Quantizes tokens [0, n) of x (n <= 16) with quantizeRow into `rowScratch` and transposes them
// into the tile layout; tokens n..15 are zeros.
template <class K>
void layOutTokens(const float* x, int64_t xStride, int64_t n, int64_t cols, uint8_t* rowScratch, const TokenTile& tt) {
  const size_t rowBytes = quantizedRowBytes(cols);
  const int64_t groups = cols / K::kGroup, words = cols / 4;
  auto* a32 = reinterpret_cast<int32_t*>(tt.a);
  auto* b32 = reinterpret_cast<int32_t*>(tt.b);
  std::memset(tt.a, 0, size_t(cols) * kTile);
  std::memset(tt.b, 0, size_t(cols) * kTile);
  std::memset(tt.s, 0, size_t(groups) * kTile * 4);
  std::memset(tt.sum, 0, size_t(cols / 32) * kTile * 4);
  for (int64_t t = 0; t < n; t++) {
    uint8_t* p = rowScratch + size_t(t) * rowBytes;
    quantizeRow(x + t * xStride, cols, 0, p);
    const QuantizedRow q = layoutRow(p, cols);
    const auto* qa = reinterpret_cast<const int32_t*>(q.a);
    const auto* qb = reinterpret_cast<const int32_t*>(q.b);
    for (int64_t i = 0; i < words; i++) {
      a32[i * kTile + t] = qa[i];
      b32[i * kTile + t] = qb[i];
    }
    for (int64_t g = 0; g < groups; g++) tt.s[g * kTile + t] = q.scale[g * K::kGroup / 32];
    for (int64_t j = 0; j < cols / 32; j++) tt.sum[j * kTile + t] = q.bsum[j];
  }
}

// One row tile's weights: bytes in element order, W_g and (q4_K) dmin*m_g per row.
struct RowTile {
  uint8_t* q;     // 16 x cols
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
  for (int64_t i = 0; i < kTile; i++) {
    uint8_t* q = rt.q + i * w.cols;
    float* scales = rt.scales + i * groups;
    float* mins = rt.mins + i * groups;
    if (i < n) {
      K::unpackRow(w.data + size_t(r0 + i) * w.rowStride, w.cols, q, scales, mins);
    } else {  // padding rows: zeros, never stored
      std::memset(q, 0, size_t(w.cols));
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

// 16 rows x 16 tokens: y for rows r0 .. r0 + nRows - 1 and tokens t0 .. t0 + tt.tokens - 1.
template <class K>
void tileProduct(const RowTile& rt, const TokenTile& tt, int64_t cols, int64_t r0, int64_t nRows, float* y,
                 int64_t yStride, int32_t* products, float* lanes) {
  const int64_t groups = cols / K::kGroup;
  for (int lane = 0; lane < K::kLanes; lane++) {
    __m512 acc[kTile];
    for (int i = 0; i < kTile; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t g = lane; g < groups; g += K::kLanes) {
      _tile_loadd(0, rt.q + g * K::kGroup, int(cols));
      _tile_loadd(1, tt.a + g * K::kGroup * kTile, 4 * kTile);
      _tile_loadd(2, tt.b + g * K::kGroup * kTile, 4 * kTile);
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
      _tile_stored(4, products + kTile * kTile, 4 * kTile);
      const __m512 s = _mm512_loadu_ps(tt.s + g * kTile);
#pragma GCC unroll 16
      for (int i = 0; i < kTile; i++) {
        const __m512i pa = _mm512_load_si512(products + i * kTile);
        const __m512i pb = _mm512_load_si512(products + (kTile + i) * kTile);
        const __m512i sums = _mm512_add_epi32(_mm512_slli_epi32(pa, 8), pb);
        const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(rt.scales[i * groups + g]), s);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[i]);
      }
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
      __m512 mins[8];
      for (int lane = 0; lane < 8; lane++) {
        mins[lane] = _mm512_setzero_ps();
        for (int64_t g = lane; g < groups; g += 8) {
          mins[lane] =
              _mm512_fmadd_ps(_mm512_set1_ps(rt.mins[i * groups + g]), _mm512_loadu_ps(tt.sum + g * kTile), mins[lane]);
        }
      }
      result = _mm512_sub_ps(result, sumLanes8(mins));
    }
    _mm512_store_ps(out, result);
    for (int64_t t = 0; t < tt.tokens; t++) y[t * yStride + r0 + i] = out[t];
  }
}

template <class K>
void amxRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
             int64_t rowBegin, int64_t rowEnd) {
  const int64_t cols = w.cols, groups = cols / K::kGroup;
  const size_t tokenTileBytes = alignUp(TokenTile::bytes(cols, groups));
  const size_t rowTileBytes = alignUp(RowTile::bytes(cols, groups));
  const size_t rowScratchBytes = alignUp(quantizedRowBytes(cols)) * kTile;
  const size_t productBytes = 2 * kTile * kTile * 4, laneBytes = size_t(K::kLanes) * kTile * kTile * 4;
  const size_t total = kChunkTiles * tokenTileBytes + rowTileBytes + rowScratchBytes + productBytes + laneBytes;
  auto* base = reinterpret_cast<uint8_t*>(threadScratch((total + 3) / 4));
  uint8_t* tokenTiles = base;
  const RowTile rows = RowTile::at(tokenTiles + kChunkTiles * tokenTileBytes, cols, groups);
  uint8_t* rowScratch = reinterpret_cast<uint8_t*>(rows.q) + rowTileBytes;
  auto* products = reinterpret_cast<int32_t*>(rowScratch + rowScratchBytes);
  auto* lanes = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(products) + productBytes);

  configureTiles<K>();
  for (int64_t t0 = 0; t0 < nTokens; t0 += kChunkTiles * kTile) {
    const int64_t chunkTokens = std::min(nTokens - t0, kChunkTiles * kTile);
    const int64_t nTiles = (chunkTokens + kTile - 1) / kTile;
    TokenTile tiles[kChunkTiles];
    for (int64_t j = 0; j < nTiles; j++) {
      tiles[j] = TokenTile::at(tokenTiles + size_t(j) * tokenTileBytes, cols, groups);
      tiles[j].tokens = std::min<int64_t>(kTile, chunkTokens - j * kTile);
      layOutTokens<K>(x + (t0 + j * kTile) * xStride, xStride, tiles[j].tokens, cols, rowScratch, tiles[j]);
    }
    for (int64_t r0 = rowBegin; r0 < rowEnd; r0 += kTile) {
      const int64_t nRows = std::min<int64_t>(kTile, rowEnd - r0);
      unpackRows<K>(w, r0, nRows, rows);
      for (int64_t j = 0; j < nTiles; j++) {
        tileProduct<K>(rows, tiles[j], cols, r0, nRows, y + (t0 + j * kTile) * yStride, yStride, products, lanes);
      }
    }
  }
  _tile_release();
}

}  // namespace

void matmulRowsAvx512Amx(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                         int64_t yStride, int64_t rowBegin, int64_t rowEnd) {
  using quant::TensorType;
  if (nTokens >= kMinTokens) {
    switch (w.type) {
      case TensorType::kQ4_K:
        return amxRows<KernelQ4_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
      case TensorType::kQ6_K:
        return amxRows<KernelQ6_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
      case TensorType::kQ8_0:
        return amxRows<KernelQ8_0>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
      default:
        break;
    }
  }
  return matmulRowsAvx512Vnni(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
}

}  // namespace jitllm::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
