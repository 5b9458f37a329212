// matmulRows for AVX-512 (F, BW, VL, DQ) with FMA and F16C: 16 float lanes.
//
// Compiled for AVX-512 through a target pragma so the rest of the binary stays baseline x86-64;
// matmul.cc calls in only after isaSupported(Isa::kAvx512). System headers come before the
// pragma so no inline library function is compiled (and possibly shared) with wide instructions.
// GCC 12 warns that the "undefined" pass-through vectors inside its own intrinsics are used
// uninitialized (GCC bug 105593, fixed in 13); the warning is about the header, not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

namespace jitllm::cpu::detail {
namespace {

using quant::block_q4_0;
using quant::block_q4_K;
using quant::block_q5_K;
using quant::block_q6_K;
using quant::block_q8_0;

struct Avx512Vec {
  static constexpr int kLanes = 16;
  // 4 x 4 accumulators + 4 weight vectors + 1 activation fit the 32 zmm registers.
  static constexpr int kRowTile = 4;
  static constexpr int kTokenTile = 4;
  using Reg = __m512;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg loadPartial(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
  static void store(float* p, Reg r) { _mm512_storeu_ps(p, r); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(Reg r) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(r), _mm512_extractf32x8_ps(r, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }
};

float halfAt(const uint16_t& h) { return _cvtsh_ss(h); }  // exact, as quant::fp16ToFp32

// 0, 1, ..., 15 as floats: multiplied by a scale it is the table of all 4-bit values.
__m512 iota16() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

struct DecodeF32 {
  static constexpr int kBlockElems = 16;
  static constexpr size_t kBlockBytes = 64;
  static constexpr bool kPartialTail = true;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(_mm512_loadu_ps(reinterpret_cast<const float*>(p)));
  }
  static __m512 decodePartial(const uint8_t* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
};

struct DecodeF16 {
  static constexpr int kBlockElems = 16;
  static constexpr size_t kBlockBytes = 32;
  static constexpr bool kPartialTail = true;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
  static __m512 decodePartial(const uint8_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p));
  }
};

struct DecodeBF16 {
  static constexpr int kBlockElems = 16;
  static constexpr size_t kBlockBytes = 32;
  static constexpr bool kPartialTail = true;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
  static __m512 decodePartial(const uint8_t* p, int n) {
    return widen(_mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p));
  }
};

struct DecodeQ8_0 {
  static constexpr int kBlockElems = 32;
  static constexpr size_t kBlockBytes = sizeof(block_q8_0);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q8_0*>(p);
    const __m512 d = _mm512_set1_ps(halfAt(b->d));
    for (int h = 0; h < 2; h++) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * h));
      emit(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
    }
  }
};

// 4-bit types look their weights up in a 16-entry table of decoded values (vpermps ignores all
// but the low 4 bits of each index lane, so a nibble needs no masking). The table is built with
// the reference's own float operations, so the weights are bit-exact.
struct DecodeQ4_0 {
  static constexpr int kBlockElems = 32;
  static constexpr size_t kBlockBytes = sizeof(block_q4_0);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q4_0*>(p);
    const __m512 table = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8)), _mm512_set1_ps(halfAt(b->d)));
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
    emit(_mm512_permutexvar_ps(q, table));
    emit(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));
  }
};

// A broadcast of a float that the compiler must load from memory: a broadcast from memory is a
// plain load, while GCC's "optimization" of keeping the value in a register costs two shuffles on
// the port the table lookups need (measured: 90 extra shuffle-port uops per q4_K block).
__m512 broadcastFromMemory(const float* p) {
  __asm__("" : "+r"(p));  // hides where p points, so the store-to-load cannot be forwarded
  return _mm512_set1_ps(*p);
}

// The float scales (d * sc) and mins (dmin * mn) of the 8 sub-blocks of a q4_K / q5_K block,
// computed 8 at a time and kept in memory for broadcastFromMemory.
struct ScalesMinsK4 {
  alignas(32) float scale[8];
  alignas(32) float min[8];
  __m512 scaleOf(int s) const { return broadcastFromMemory(scale + s); }
  __m512 minOf(int s) const { return broadcastFromMemory(min + s); }
  ScalesMinsK4(const uint8_t* packed, float d, float dmin) {
    alignas(16) uint8_t raw[16];
    quant::unpackScalesMinsK4(packed, raw);
    const __m512 values =
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(raw))));
    const __m512 factors = _mm512_insertf32x8(_mm512_set1_ps(d), _mm256_set1_ps(dmin), 1);
    const __m512 products = _mm512_mul_ps(values, factors);
    _mm256_store_ps(scale, _mm512_castps512_ps256(products));
    _mm256_store_ps(min, _mm512_extractf32x8_ps(products, 1));
  }
};

struct DecodeQ4_K {
  static constexpr int kBlockElems = quant::kQK_K;
  static constexpr size_t kBlockBytes = sizeof(block_q4_K);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q4_K*>(p);
    const ScalesMinsK4 sm(b->scales, halfAt(b->d), halfAt(b->dmin));
    const __m512 iota = iota16();
    for (int pair = 0; pair < 4; pair++) {
      const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(iota, sm.scaleOf(2 * pair)), sm.minOf(2 * pair));
      const __m512 hi = _mm512_sub_ps(_mm512_mul_ps(iota, sm.scaleOf(2 * pair + 1)), sm.minOf(2 * pair + 1));
      const uint8_t* q = b->qs + 32 * pair;
      const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
      emit(_mm512_permutexvar_ps(q0, lo));
      emit(_mm512_permutexvar_ps(q1, lo));
      emit(_mm512_permutexvar_ps(_mm512_srli_epi32(q0, 4), hi));
      emit(_mm512_permutexvar_ps(_mm512_srli_epi32(q1, 4), hi));
    }
  }
};

// q5_K: a 32-entry table in two registers (vpermt2ps takes 5 index bits); the fifth bit is
// moved from qh to bit 4 of the index and merged with the nibble by one bitwise select.
struct DecodeQ5_K {
  static constexpr int kBlockElems = quant::kQK_K;
  static constexpr size_t kBlockBytes = sizeof(block_q5_K);
  static constexpr bool kPartialTail = false;

  // Bit `kBit` of each lane moved to bit 4 (other bits are don't-care for the table lookup).
  template <int kBit>
  static __m512i bitToFour(__m512i h) {
    if constexpr (kBit <= 4) {
      return _mm512_slli_epi32(h, 4 - kBit);
    } else {
      return _mm512_srli_epi32(h, kBit - 4);
    }
  }
  // (nibble & 0xF) | (high & ~0xF): ternary-logic truth table "c ? a : b" with c = 0x0F.
  static __m512i merge(__m512i nibble, __m512i high) {
    return _mm512_ternarylogic_epi32(nibble, high, _mm512_set1_epi32(0x0F), 0xE4);
  }

  template <int kPair, class Emit>
  static void decodePair(const block_q5_K* b, const ScalesMinsK4& sm, __m512i h0, __m512i h1, Emit& emit) {
    const __m512 iota = iota16();
    const __m512 iota2 = _mm512_add_ps(iota, _mm512_set1_ps(16));
    const __m512 d1 = sm.scaleOf(2 * kPair), m1 = sm.minOf(2 * kPair);
    const __m512 d2 = sm.scaleOf(2 * kPair + 1), m2 = sm.minOf(2 * kPair + 1);
    const __m512 loA = _mm512_sub_ps(_mm512_mul_ps(iota, d1), m1);
    const __m512 loB = _mm512_sub_ps(_mm512_mul_ps(iota2, d1), m1);
    const __m512 hiA = _mm512_sub_ps(_mm512_mul_ps(iota, d2), m2);
    const __m512 hiB = _mm512_sub_ps(_mm512_mul_ps(iota2, d2), m2);
    const uint8_t* q = b->qs + 32 * kPair;
    const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
    emit(_mm512_permutex2var_ps(loA, merge(q0, bitToFour<2 * kPair>(h0)), loB));
    emit(_mm512_permutex2var_ps(loA, merge(q1, bitToFour<2 * kPair>(h1)), loB));
    emit(_mm512_permutex2var_ps(hiA, merge(_mm512_srli_epi32(q0, 4), bitToFour<2 * kPair + 1>(h0)), hiB));
    emit(_mm512_permutex2var_ps(hiA, merge(_mm512_srli_epi32(q1, 4), bitToFour<2 * kPair + 1>(h1)), hiB));
  }

  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q5_K*>(p);
    const ScalesMinsK4 sm(b->scales, halfAt(b->d), halfAt(b->dmin));
    const __m512i h0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qh)));
    const __m512i h1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qh + 16)));
    decodePair<0>(b, sm, h0, h1, emit);
    decodePair<1>(b, sm, h0, h1, emit);
    decodePair<2>(b, sm, h0, h1, emit);
    decodePair<3>(b, sm, h0, h1, emit);
  }
};

// q6_K: the 6-bit quants of a 128-element half are assembled 32 at a time with byte operations,
// recentred to -32..31 and parked in a small stack buffer, then widened 16 at a time.
struct DecodeQ6_K {
  static constexpr int kBlockElems = quant::kQK_K;
  static constexpr size_t kBlockBytes = sizeof(block_q6_K);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q6_K*>(p);
    const float d = halfAt(b->d);
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const __m256i bias = _mm256_set1_epi8(32);
    alignas(32) int8_t q[128];
    // d * scale of all 16 sub-blocks, kept in memory for broadcastFromMemory.
    alignas(64) float scale[16];
    _mm512_store_ps(scale, _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                                                reinterpret_cast<const __m128i*>(b->scales))))));
    for (int half = 0; half < 2; half++) {
      const auto* ql = reinterpret_cast<const __m256i*>(b->ql + 64 * half);
      const __m256i l0 = _mm256_loadu_si256(ql), l1 = _mm256_loadu_si256(ql + 1);
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * half));
      // 16-bit shifts leak bits across byte boundaries; the masks remove exactly those bits.
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, bits45));
      const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                         _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(q1, bias));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32), _mm256_sub_epi8(q2, bias));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64), _mm256_sub_epi8(q3, bias));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 96), _mm256_sub_epi8(q4, bias));
      for (int c = 0; c < 8; c++) {
        const __m512i qi = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * c)));
        emit(_mm512_mul_ps(_mm512_cvtepi32_ps(qi), broadcastFromMemory(scale + 8 * half + c)));
      }
    }
  }
};

#include "kernels/cpu/gemm/matmul_driver.inc"

}  // namespace

void matmulRowsAvx512(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd) {
  using V = Avx512Vec;
  using quant::TensorType;
  switch (w.type) {
    case TensorType::kF32:
      return decodedRows<V, DecodeF32>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kF16:
      return decodedRows<V, DecodeF16>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kBF16:
      return decodedRows<V, DecodeBF16>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ8_0:
      return decodedRows<V, DecodeQ8_0>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ4_0:
      return decodedRows<V, DecodeQ4_0>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ4_K:
      return decodedRows<V, DecodeQ4_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ5_K:
      return decodedRows<V, DecodeQ5_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ6_K:
      return decodedRows<V, DecodeQ6_K>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case TensorType::kQ5_0:
      // No float decoder: the integer contract's 256-bit kernels (every AVX-512 CPU has AVX2), as
      // on the VNNI paths - gemma3-1b's 1152-wide rows are q5_0 in a Q4_K_M file.
      return matmulRowsInt8(kInt8Avx2, w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    default:
      return referenceRows<V>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
}

}  // namespace jitllm::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
