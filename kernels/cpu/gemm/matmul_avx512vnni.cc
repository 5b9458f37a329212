// matmulRows for AVX-512 with VNNI: integer dot products (vpdpbusd) for q4_K, q6_K and q8_0
// (q4_0 and q5_K take the 256-bit kernels of the same contract, matmul_int8_256.inc).
//
// Activations are quantized on the fly into two int8 vectors per block of 32 (about 15 bits),
// weights stay in their GGUF blocks (no repacking, no second copy), and each group of weights
// sharing a scale is one exact integer product and one float multiply-add per token: the
// contract is written out in matmul_int8.inc, shared with the AMX prefill (matmul_amx.cc), which
// gives the same bits. Here the integer products are vpdpbusd on 64 weight bytes q (unsigned,
// with the type's offset o: q4_K 0, q6_K 32, q8_0 128 after flipping the sign bit):
//   L = 256 * dpbusd(q, a) + dpbusd(q, b) - o * sum4(256 a + b)       (16 int32 lanes, exact)
// the last term precomputed per token; the lanes of a group are then summed in integer.
// Everything per (row, token) happens in one fixed order that depends on neither the row range
// nor the number of tokens, so prefill and decode give the same bits.
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
#include <limits>
#include <type_traits>

#include "kernels/cpu/gemm/int8_activation.h"
#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/cpu/gemm/packed_rows.h"
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

// Decode rows computed together, sharing each activation load: kRowTile for matrices in the
// caches, one for those that stream from memory (WeightView::streamed). A thread reading its rows
// one after the other makes one sequential stream, which the prefetches below and the hardware
// keep ahead of; in the caches, sharing the activation loads is what counts. End to end on 2
// threads one row was ~1.4x faster than four for the 1B shape (807 MB of weights) and four ~1.2x
// faster than one for the tiny model (15 MB). A threshold on a matrix's own size cannot tell the
// two apart (the tiny model's 6.7 MB head is in the caches, the 1B's 2.4 MB matrices are not), so
// the device decides by its weights' total (WeightView::streamed; docs/cpu-kernels.md).
constexpr int kRowTile = 4;
// Prefill tiles (each kernel's kTileRows x kTileTokens): rows x tokens sharing each weight
// extraction (rows) and activation load (tokens), their float accumulators and the extracted
// weights within the 32 vector registers. Sizes measured with matmul_microbench (2x4, 4x4, 2x8,
// 1x8): 2x8 for the K-quants, 2x4 for q8_0, whose extraction is cheap.

#include "kernels/cpu/gemm/matmul_int8.inc"

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
  // Decode streams the weights once from memory: every cache line of each row some distance ahead
  // is requested into L2 (prefetcht1: L2's own request queue, leaving L1's line fill buffers,
  // which the hardware's L1 prefetcher fills from L2, to the loads): prefetching into L1 filled its
  // line fill buffers and made the prefetches themselves the hot spot. The distance is in bytes and
  // matters both ways, differently per machine: on one, 4 KB was best for the K-quants (+11-23 %
  // decode over 2 KB into L1) and 2 KB for q8_0; on a Zen 4 VM 8-16 KB streamed rows twice as fast
  // as 2 KB. So the CPU's tuning measures it (WeightView::prefetchBytes) and K::kPrefetchBytes is
  // the distance without one. Rows are contiguous, so near a row's end this fetches the start of
  // the next.
  PrefetchStream ahead[NR];
  for (int i = 0; i < NR; i++) ahead[i] = PrefetchStream(rows[i], prefetchDistance<K>(w));
  for (int64_t u = 0; u < units; u++) {
    for (int i = 0; i < NR; i++) {
      ahead[i].through(rows[i] + size_t(u + 1) * K::kUnitBytes);
      K::unit(rows[i] + size_t(u) * K::kUnitBytes, x, u * K::kUnit, st[i]);
    }
  }
  for (int i = 0; i < NR; i++) ahead[i].through(rows[i] + w.rowStride);
  if constexpr (std::is_same_v<K, KernelQ8_0>) {
    if (w.cols % K::kUnit != 0) {
      const int n = int(w.cols % K::kUnit / 32);
      for (int i = 0; i < NR; i++) K::tail(rows[i] + size_t(units) * K::kUnitBytes, n, x, units * K::kUnit, st[i]);
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
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) {
      typename K::Unpacked up;
      K::unpack(rows[i] + size_t(u) * K::kUnitBytes, up);
#pragma GCC unroll 16
      for (int j = 0; j < NT; j++) K::apply(up, xs[j], u * K::kUnit, st[i][j]);
    }
  }
  if constexpr (std::is_same_v<K, KernelQ8_0>) {
    if (w.cols % K::kUnit != 0) {
      const int n = int(w.cols % K::kUnit / 32);
      for (int i = 0; i < NR; i++) {
        for (int j = 0; j < NT; j++)
          K::tail(rows[i] + size_t(units) * K::kUnitBytes, n, xs[j], units * K::kUnit, st[i][j]);
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
  // A few tokens (decode, small batches) quantized once per thread for a group of products
  // (WeightView::inputEpoch); their form depends on the kernel's offset.
  const bool keep = nTokens <= kTokenBlock && w.inputEpoch != 0;
  const QuantizedInput kept = keep ? threadQuantizedInput(x, xStride, nTokens, w.cols, 512 + K::kOffset, w.inputEpoch,
                                                          rowBytes * size_t(nTokens))
                                   : QuantizedInput{nullptr, false};
  auto* scratch =
      keep ? kept.data : reinterpret_cast<uint8_t*>(threadScratch((rowBytes * size_t(blockTokens) + 3) / 4));
  for (int64_t t0 = 0; t0 < nTokens; t0 += kTokenBlock) {
    const int64_t nt = std::min(kTokenBlock, nTokens - t0);
    for (int64_t t = 0; t < nt && !kept.ready; t++)
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
  // Decode of a matrix with a packed copy (packed_rows.h): the 256-bit kernels' packed form, the
  // same bits (token vectors start at 8 tokens; fewer go row by row).
  if (w.packed != nullptr && nTokens < 8 && packedDecode(Isa::kAvx512Vnni, w.type)) {
    return matmulRowsInt8(kInt8NarrowVnni, w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
  if (w.narrowInt8 && (w.type == TensorType::kQ4_K || w.type == TensorType::kQ6_K || w.type == TensorType::kQ8_0)) {
    // The tuner found the 256-bit kernels faster for this product here (cpu_tuning.h).
    return matmulRowsInt8(kInt8NarrowVnni, w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
  switch (w.type) {
    case TensorType::kQ4_K:
      return vnniRows<KernelQ4_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ6_K:
      return vnniRows<KernelQ6_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ8_0:
      return vnniRows<KernelQ8_0>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ5_K:
    case TensorType::kQ4_0:
    case TensorType::kQ5_0:
      // The contract's 256-bit kernels (no 512-bit form of these yet): the same bits as every
      // other integer path, and far faster than the float kernels.
      return matmulRowsInt8(kInt8NarrowVnni, w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
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
