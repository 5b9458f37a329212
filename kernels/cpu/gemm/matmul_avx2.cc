// matmulRows for AVX2 with FMA and F16C: 8 float lanes.
//
// Compiled for AVX2 through a target pragma so the rest of the binary stays baseline x86-64;
// matmul.cc calls in only after isaSupported(Isa::kAvx2). System headers come before the pragma
// so no inline library function is compiled (and possibly shared) with wide instructions.
// GCC 12 warns that the "undefined" pass-through vectors inside its own intrinsics are used
// uninitialized (GCC bug 105593, fixed in 13); the warning is about the header, not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace jitllm::cpu::detail {
namespace {

using quant::block_q4_0;
using quant::block_q4_K;
using quant::block_q5_K;
using quant::block_q6_K;
using quant::block_q8_0;

__m256i firstLanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

struct Avx2Vec {
  static constexpr int kLanes = 8;
  // 4 x 3 accumulators + 4 weight vectors fit the 16 ymm registers, the activation an FMA operand
  // from memory (matmul_microbench, f16 256 x 688 x 128 tokens on Zen 4: 74 GFLOP/s at 4 x 2,
  // 103 at 4 x 3 and 3 x 4: 8 accumulators are too few to cover the FMA latency at two a cycle).
  static constexpr int kRowTile = 4;
  static constexpr int kTokenTile = 3;
  using Reg = __m256;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg loadPartial(const float* p, int n) { return _mm256_maskload_ps(p, firstLanes(n)); }
  static void store(float* p, Reg r) { _mm256_storeu_ps(p, r); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(Reg r) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }
};

float halfAt(const uint16_t& h) { return _cvtsh_ss(h); }  // exact, as quant::fp16ToFp32

// 8 bytes from p, zero-extended to 8 int32 lanes.
__m256i widenU8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
__m256i widenI8(const int8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// A broadcast of a float that the compiler must load from memory (a plain load), rather than
// keep in a register and broadcast with shuffles that compete with the decoding work.
__m256 broadcastFromMemory(const float* p) {
  __asm__("" : "+r"(p));  // hides where p points, so the store-to-load cannot be forwarded
  return _mm256_set1_ps(*p);
}

// The float scales (d * sc) and mins (dmin * mn) of the 8 sub-blocks of a q4_K / q5_K block,
// computed 8 at a time and kept in memory for broadcastFromMemory.
struct ScalesMinsK4 {
  alignas(32) float scale[8];
  alignas(32) float min[8];
  __m256 scaleOf(int s) const { return broadcastFromMemory(scale + s); }
  __m256 minOf(int s) const { return broadcastFromMemory(min + s); }
  ScalesMinsK4(const uint8_t* packed, float d, float dmin) {
    alignas(16) uint8_t raw[16];
    quant::unpackScalesMinsK4(packed, raw);
    _mm256_store_ps(scale, _mm256_mul_ps(_mm256_cvtepi32_ps(widenU8(raw)), _mm256_set1_ps(d)));
    _mm256_store_ps(min, _mm256_mul_ps(_mm256_cvtepi32_ps(widenU8(raw + 8)), _mm256_set1_ps(dmin)));
  }
};

struct DecodeF32 {
  static constexpr int kBlockElems = 8;
  static constexpr size_t kBlockBytes = 32;
  static constexpr bool kPartialTail = true;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(_mm256_loadu_ps(reinterpret_cast<const float*>(p)));
  }
  static __m256 decodePartial(const uint8_t* p, int n) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(p), firstLanes(n));
  }
};

struct DecodeF16 {
  static constexpr int kBlockElems = 8;
  static constexpr size_t kBlockBytes = 16;
  static constexpr bool kPartialTail = true;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static __m256 decodePartial(const uint8_t* p, int n) {
    uint16_t h[8] = {};
    std::memcpy(h, p, size_t(n) * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  }
};

struct DecodeBF16 {
  static constexpr int kBlockElems = 8;
  static constexpr size_t kBlockBytes = 16;
  static constexpr bool kPartialTail = true;
  static __m256 widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static __m256 decodePartial(const uint8_t* p, int n) {
    uint16_t h[8] = {};
    std::memcpy(h, p, size_t(n) * sizeof(uint16_t));
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  }
};

struct DecodeQ8_0 {
  static constexpr int kBlockElems = 32;
  static constexpr size_t kBlockBytes = sizeof(block_q8_0);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q8_0*>(p);
    const __m256 d = _mm256_set1_ps(halfAt(b->d));
    for (int c = 0; c < 4; c++) emit(_mm256_mul_ps(_mm256_cvtepi32_ps(widenI8(b->qs + 8 * c)), d));
  }
};

struct DecodeQ4_0 {
  static constexpr int kBlockElems = 32;
  static constexpr size_t kBlockBytes = sizeof(block_q4_0);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q4_0*>(p);
    const __m256 d = _mm256_set1_ps(halfAt(b->d));
    const __m256i low4 = _mm256_set1_epi32(0xF), eight = _mm256_set1_epi32(8);
    const __m256i q0 = widenU8(b->qs), q1 = widenU8(b->qs + 8);
    auto value = [&](__m256i q) { return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, eight)), d); };
    emit(value(_mm256_and_si256(q0, low4)));
    emit(value(_mm256_and_si256(q1, low4)));
    emit(value(_mm256_srli_epi32(q0, 4)));
    emit(value(_mm256_srli_epi32(q1, 4)));
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
    const __m256i low4 = _mm256_set1_epi32(0xF);
    for (int pair = 0; pair < 4; pair++) {
      const __m256 d1 = sm.scaleOf(2 * pair), m1 = sm.minOf(2 * pair);
      const __m256 d2 = sm.scaleOf(2 * pair + 1), m2 = sm.minOf(2 * pair + 1);
      const uint8_t* q = b->qs + 32 * pair;
      __m256i raw[4];
      for (int c = 0; c < 4; c++) raw[c] = widenU8(q + 8 * c);
      for (int c = 0; c < 4; c++) {
        const __m256 qf = _mm256_cvtepi32_ps(_mm256_and_si256(raw[c], low4));
        emit(_mm256_sub_ps(_mm256_mul_ps(d1, qf), m1));
      }
      for (int c = 0; c < 4; c++) {
        const __m256 qf = _mm256_cvtepi32_ps(_mm256_srli_epi32(raw[c], 4));
        emit(_mm256_sub_ps(_mm256_mul_ps(d2, qf), m2));
      }
    }
  }
};

struct DecodeQ5_K {
  static constexpr int kBlockElems = quant::kQK_K;
  static constexpr size_t kBlockBytes = sizeof(block_q5_K);
  static constexpr bool kPartialTail = false;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const block_q5_K*>(p);
    const ScalesMinsK4 sm(b->scales, halfAt(b->d), halfAt(b->dmin));
    const __m256i low4 = _mm256_set1_epi32(0xF), bit4 = _mm256_set1_epi32(0x10);
    __m256i high[4];
    for (int c = 0; c < 4; c++) high[c] = widenU8(b->qh + 8 * c);
    for (int pair = 0; pair < 4; pair++) {
      const __m256 d1 = sm.scaleOf(2 * pair), m1 = sm.minOf(2 * pair);
      const __m256 d2 = sm.scaleOf(2 * pair + 1), m2 = sm.minOf(2 * pair + 1);
      const uint8_t* q = b->qs + 32 * pair;
      // Bits 2*pair and 2*pair+1 of qh, moved to bit 4: shift by 4 - bit (either direction).
      const __m128i shiftLo = _mm_cvtsi32_si128(2 * pair);
      const __m128i shiftHi = _mm_cvtsi32_si128(2 * pair + 1);
      __m256i raw[4];
      for (int c = 0; c < 4; c++) raw[c] = widenU8(q + 8 * c);
      for (int c = 0; c < 4; c++) {
        const __m256i h = _mm256_and_si256(_mm256_slli_epi32(_mm256_srl_epi32(high[c], shiftLo), 4), bit4);
        const __m256 qf = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(raw[c], low4), h));
        emit(_mm256_sub_ps(_mm256_mul_ps(d1, qf), m1));
      }
      for (int c = 0; c < 4; c++) {
        const __m256i h = _mm256_and_si256(_mm256_slli_epi32(_mm256_srl_epi32(high[c], shiftHi), 4), bit4);
        const __m256 qf = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32(raw[c], 4), h));
        emit(_mm256_sub_ps(_mm256_mul_ps(d2, qf), m2));
      }
    }
  }
};

// q6_K: as in the AVX-512 variant, quants assembled 32 at a time with byte operations.
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
    alignas(32) float scale[16];
    for (int i = 0; i < 2; i++) {
      const __m256 sc = _mm256_cvtepi32_ps(widenI8(b->scales + 8 * i));
      _mm256_store_ps(scale + 8 * i, _mm256_mul_ps(_mm256_set1_ps(d), sc));
    }
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
      for (int c = 0; c < 16; c++) {
        const __m256 qf = _mm256_cvtepi32_ps(widenI8(q + 8 * c));
        emit(_mm256_mul_ps(qf, broadcastFromMemory(scale + 8 * half + c / 2)));
      }
    }
  }
};

#include "kernels/cpu/gemm/matmul_driver.inc"

}  // namespace

void matmulRowsAvx2(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                    int64_t rowBegin, int64_t rowEnd) {
  using V = Avx2Vec;
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
