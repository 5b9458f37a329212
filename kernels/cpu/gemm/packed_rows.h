// Decode's own copy of a quantized matrix: its rows interleaved by 8.
//
// A decode product multiplies each weight once by one token, so what bounds it on the CPU is the
// instructions around each block's integer products, not the products: in the file's layout a row
// is a dot product on its own, and every sub-block's sum has to be gathered from the lanes of a
// vector (a reduction across lanes per sub-block and row) before its float scale can apply. With
// 8 rows interleaved 4 bytes at a time, one 32-byte load holds the same 4 weights of 8 rows, a
// broadcast token quad multiplies all of them, and each lane of the sums is one row's sub-block:
// no reduction at all, and the scale steps run on 8 rows at once. The sums and float steps are
// the integer contract's (matmul_int8.inc), so every row keeps its bits: the packed kernels are
// a faster way to the same results, never other results (tests/quant/matmul_test.cc,
// Matmul.PackedRowsGiveEveryRowTheBitsOfTheFileLayout).
//
// The copy costs memory (q4_K: 148 bytes per 144 of a row's super-block, its sub-block scales and
// mins unpacked; q5_K 180 per 176; q6_K the same 210) and one pass over the matrix; the CPU device
// makes it for the matrices it multiplies on Isas whose decode reads it (packedDecode) and frees
// it with the weights (kernels/cpu/packed_copies.h).
//
// Thread-safety: pure functions; packRows may run on several threads at once for disjoint groups.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm/isa.h"
#include "kernels/cpu/gemm/matmul.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm::cpu {

// Rows interleaved together: a packed group.
constexpr int64_t kPackedRows = 8;

// One q4_K super-block (256 columns) of a group's 8 rows.
struct PackedQ4_K {
  uint16_t d[kPackedRows];  // each row's d (float16), then its dmin
  uint16_t dmin[kPackedRows];
  uint8_t scales[8][kPackedRows];  // [sub-block][row]: the 6-bit scales, unpacked
  uint8_t mins[8][kPackedRows];    // [sub-block][row]: the 6-bit mins
  // [pair][quad][row][byte]: the row's qs[32 pair + 4 quad + byte] (low nibbles: sub-block 2 pair,
  // element 4 quad + byte; high nibbles: sub-block 2 pair + 1, the same element).
  uint8_t qs[4][8][kPackedRows][4];
};
static_assert(sizeof(PackedQ4_K) == 1184);

// One q5_K super-block of a group's 8 rows: q4_K's layout for the low 4 bits, the fifth bits
// interleaved the same way (180 bytes per row's 176).
struct PackedQ5_K {
  PackedQ4_K low;
  // [quad][row][byte]: the row's qh[4 quad + byte] (bit g: sub-block g's element 4 quad + byte).
  uint8_t qh[8][kPackedRows][4];
};
static_assert(sizeof(PackedQ5_K) == 1440);

// One q6_K super-block of a group's 8 rows: the file's bytes, interleaved by row 4 at a time (as
// many bytes as the rows' own blocks).
struct PackedQ6_K {
  uint16_t d[kPackedRows];         // each row's d (float16)
  int8_t scales[16][kPackedRows];  // [sub-block][row]
  // [half][quad][row][byte]: the row's ql[64 half + 4 quad + byte] (quads 0-7: low nibbles of
  // elements 128 half + 4 quad + byte, high nibbles 64 further; quads 8-15 the same 32 further).
  uint8_t ql[2][16][kPackedRows][4];
  // [half][quad][row][byte]: the row's qh[32 half + 4 quad + byte] (bits 0-1, 2-3, 4-5, 6-7: the
  // high bits of elements 128 half + 4 quad + byte, + 32, + 64, + 96).
  uint8_t qh[2][8][kPackedRows][4];
};
static_assert(sizeof(PackedQ6_K) == 1680);  // 8 blocks of 210

// Whether decode on `isa` reads a packed copy of a matrix of this type: q4_K, q5_K and q6_K on the
// Isas that run the integer contract (AVX2, AVX-VNNI and the AVX-512 VNNI family, whose decode then
// takes the 256-bit kernels).
bool packedDecode(Isa isa, quant::TensorType type);

// Bytes of the packed copy of a rows x cols matrix: its first rows / 8 * 8 rows (the rest are
// multiplied from the file's layout); 0 for a type without one or fewer than 8 rows.
size_t packedBytes(quant::TensorType type, int64_t rows, int64_t cols);

// Packs groups [groupBegin, groupEnd) (rows 8 g .. 8 g + 7) of w into `out`, which holds
// packedBytes(w.type, w.rows, w.cols) bytes; group g lands at g * packedBytes(type, 8, cols).
void packRows(const WeightView& w, int64_t groupBegin, int64_t groupEnd, uint8_t* out);

}  // namespace jitllm::cpu
