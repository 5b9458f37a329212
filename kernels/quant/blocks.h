// GGUF / ggml quantization blocks, bit-exact with ggml-common.h.
//
// The struct names are ggml's on purpose (block_q4_0, ...), so a reader can put this file next
// to ggml's and check every field. A tensor row of n elements is n / QK blocks laid end to end,
// without padding. Every block size is even, so blocks keep the structs' 2-byte alignment as
// long as a row starts at an even address (GGUF aligns tensor data to 32 bytes).
// Every fp16 field is an IEEE binary16 bit pattern (see half.h).
//
// How an element's value is formed (x = the element, j its index inside the block):
//
//   q4_0  (32 per block)  q = j < 16 ? qs[j] & 0xF : qs[j-16] >> 4        x = (q - 8) * d
//   q4_1  (32)            q as in q4_0                                    x = q * d + m
//   q5_0  (32)            q = (nibble as q4_0) | (bit j of qh as u32) << 4 x = (q - 16) * d
//   q5_1  (32)            q as in q5_0                                    x = q * d + m
//   q8_0  (32)            x = qs[j] * d
//
//   K-quants hold 256 elements in sub-blocks with their own scales.
//   q4_K: 8 sub-blocks of 32. Sub-block s has a 6-bit scale sc[s] and 6-bit min mn[s], packed
//     into scales[12] ("get_scale_min_k4"): for s < 4, sc = scales[s] & 63, mn = scales[s+4] & 63;
//     for s >= 4, sc = (scales[s+4] & 0xF) | (scales[s-4] >> 6) << 4,
//                 mn = (scales[s+4] >> 4) | (scales[s] >> 6) << 4.
//     Sub-blocks come in pairs sharing 32 bytes of qs: for pair p (elements 64p..64p+63),
//     element 64p + l (l < 32) is qs[32p + l] & 0xF and element 64p + 32 + l is qs[32p + l] >> 4.
//     x = (d * sc) * q - (dmin * mn), the two products rounded to float first (as ggml does).
//   q5_K: as q4_K, plus a fifth bit: element 64p + l takes bit 2p of qh[l], element
//     64p + 32 + l takes bit 2p+1 of qh[l]; x = (d * sc) * q - (dmin * mn) with q in 0..31.
//   q6_K: 16 sub-blocks of 16, each with an int8 scale. The 256 elements are two halves of 128;
//     in half h (ql += 64h, qh += 32h, scales += 8h), for l < 32:
//       element l      : q = (ql[l]      & 0xF) | ((qh[l] >> 0) & 3) << 4
//       element l + 32 : q = (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4
//       element l + 64 : q = (ql[l]      >> 4)  | ((qh[l] >> 4) & 3) << 4
//       element l + 96 : q = (ql[l + 32] >> 4)  | ((qh[l] >> 6) & 3) << 4
//     and x = (d * scales[e / 16]) * (q - 32) for element e of the half (its index 0..127).
//
// Thread-safety: plain data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace jitllm::quant {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;        // elements in a K-quant super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of q4_K / q5_K

struct block_q4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18);

struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20);

struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];  // fifth bits, a little-endian uint32: bit j belongs to element j
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22);

struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24);

struct block_q8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(block_q8_0) == 34);

struct block_q2_K {
  uint8_t scales[kQK_K / 16];  // low nibble scale, high nibble min, per 16 elements
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(block_q2_K) == 84);

struct block_q3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(block_q3_K) == 110);

struct block_q4_K {
  uint16_t d;     // scale of the sub-block scales
  uint16_t dmin;  // scale of the sub-block mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144);

struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176);

struct block_q6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210);

// Rows of blocks are addressed with only 2-byte alignment guaranteed (see above).
static_assert(alignof(block_q4_K) == 2 && alignof(block_q6_K) == 2 && alignof(block_q8_0) == 2);

// The 6-bit scale and min of sub-block s (0..7) of a q4_K / q5_K block, unpacked.
inline void unpackScaleMinK4(int s, const uint8_t* scales, uint8_t* sc, uint8_t* mn) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *mn = scales[s + 4] & 63;
  } else {
    *sc = uint8_t((scales[s + 4] & 0xF) | ((scales[s - 4] >> 6) << 4));
    *mn = uint8_t((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
  }
}

// All 8 scales (bytes 0..7 of out) and mins (bytes 8..15) of a q4_K / q5_K block at once, with
// word-wide masks instead of 8 branchy unpackScaleMinK4 calls (a hot loop decodes every block).
inline void unpackScalesMinsK4(const uint8_t* scales, uint8_t out[16]) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, scales, sizeof u);
  const uint32_t words[4] = {
      u[0] & kLow6,                                          // scales 0..3
      (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4),         // scales 4..7
      u[1] & kLow6,                                          // mins 0..3
      ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4),  // mins 4..7
  };
  std::memcpy(out, words, sizeof words);  // little-endian: byte i of a word is sub-block i
}

// Packs 6-bit scale and min (each <= 63) of sub-block s into scales[12]; the inverse of
// unpackScaleMinK4. scales must start zeroed.
inline void packScaleMinK4(int s, uint8_t sc, uint8_t mn, uint8_t* scales) {
  if (s < 4) {
    scales[s] = uint8_t((scales[s] & 0xC0) | sc);
    scales[s + 4] = uint8_t((scales[s + 4] & 0xC0) | mn);
  } else {
    scales[s + 4] = uint8_t((sc & 0xF) | ((mn & 0xF) << 4));
    scales[s - 4] = uint8_t(scales[s - 4] | ((sc >> 4) << 6));
    scales[s] = uint8_t(scales[s] | ((mn >> 4) << 6));
  }
}

}  // namespace jitllm::quant
