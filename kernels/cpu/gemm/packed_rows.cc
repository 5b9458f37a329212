#include "kernels/cpu/gemm/packed_rows.h"

#include <cstring>

#include "base/error.h"
#include "kernels/quant/blocks.h"

namespace jitllm::cpu {

bool packedDecode(Isa isa, quant::TensorType type) {
  if (type != quant::TensorType::kQ4_K && type != quant::TensorType::kQ5_K && type != quant::TensorType::kQ6_K) {
    return false;
  }
  switch (isa) {
    case Isa::kAvx2:
    case Isa::kAvxVnni:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512Amx:
      return true;
    case Isa::kScalar:
    case Isa::kAvx512:  // float kernels: other bits, no packed form
      return false;
  }
  return false;
}

size_t packedBytes(quant::TensorType type, int64_t rows, int64_t cols) {
  if (rows < kPackedRows || cols % quant::kQK_K != 0) return 0;
  const size_t blocks = size_t(rows / kPackedRows) * size_t(cols / quant::kQK_K);
  if (type == quant::TensorType::kQ4_K) return blocks * sizeof(PackedQ4_K);
  if (type == quant::TensorType::kQ5_K) return blocks * sizeof(PackedQ5_K);
  if (type == quant::TensorType::kQ6_K) return blocks * sizeof(PackedQ6_K);
  return 0;
}

namespace {

// q4_K's and q5_K's shared fields of row r's block b into p (their blocks differ only by qh).
template <class Block>
void packKMins(const Block& b, int64_t r, PackedQ4_K& p) {
  p.d[r] = b.d;
  p.dmin[r] = b.dmin;
  uint8_t scalesMins[16];
  quant::unpackScalesMinsK4(b.scales, scalesMins);
  for (int g = 0; g < 8; g++) {
    p.scales[g][r] = scalesMins[g];
    p.mins[g][r] = scalesMins[8 + g];
  }
  for (int pair = 0; pair < 4; pair++) {
    for (int quad = 0; quad < 8; quad++) std::memcpy(p.qs[pair][quad][r], b.qs + 32 * pair + 4 * quad, 4);
  }
}

// Row r of group `group` of w, as blocks of type Block.
template <class Block>
const Block* rowBlocks(const WeightView& w, int64_t group, int64_t r) {
  return reinterpret_cast<const Block*>(w.data + size_t(kPackedRows * group + r) * w.rowStride);
}

void packQ4_K(const WeightView& w, int64_t group, PackedQ4_K* out) {
  for (int64_t u = 0; u < w.cols / quant::kQK_K; u++) {
    for (int64_t r = 0; r < kPackedRows; r++) packKMins(rowBlocks<quant::block_q4_K>(w, group, r)[u], r, out[u]);
  }
}

void packQ5_K(const WeightView& w, int64_t group, PackedQ5_K* out) {
  for (int64_t u = 0; u < w.cols / quant::kQK_K; u++) {
    for (int64_t r = 0; r < kPackedRows; r++) {
      const quant::block_q5_K& b = rowBlocks<quant::block_q5_K>(w, group, r)[u];
      packKMins(b, r, out[u].low);
      for (int quad = 0; quad < 8; quad++) std::memcpy(out[u].qh[quad][r], b.qh + 4 * quad, 4);
    }
  }
}

void packQ6_K(const WeightView& w, int64_t group, PackedQ6_K* out) {
  const int64_t blocks = w.cols / quant::kQK_K;
  for (int64_t u = 0; u < blocks; u++) {
    PackedQ6_K& p = out[u];
    for (int64_t r = 0; r < kPackedRows; r++) {
      const quant::block_q6_K& b = rowBlocks<quant::block_q6_K>(w, group, r)[u];
      p.d[r] = b.d;
      for (int g = 0; g < 16; g++) p.scales[g][r] = b.scales[g];
      for (int half = 0; half < 2; half++) {
        for (int quad = 0; quad < 16; quad++) std::memcpy(p.ql[half][quad][r], b.ql + 64 * half + 4 * quad, 4);
        for (int quad = 0; quad < 8; quad++) std::memcpy(p.qh[half][quad][r], b.qh + 32 * half + 4 * quad, 4);
      }
    }
  }
}

}  // namespace

void packRows(const WeightView& w, int64_t groupBegin, int64_t groupEnd, uint8_t* out) {
  const size_t groupBytes = packedBytes(w.type, kPackedRows, w.cols);
  JITLLM_REQUIRE(groupBytes > 0, "packRows: no packed form of a ", quant::typeTraits(w.type).name, " matrix of ",
                 w.cols, " columns");
  JITLLM_REQUIRE(0 <= groupBegin && groupBegin <= groupEnd && groupEnd <= w.rows / kPackedRows, "packRows: groups [",
                 groupBegin, ", ", groupEnd, ") outside the ", w.rows / kPackedRows, " of the matrix");
  for (int64_t g = groupBegin; g < groupEnd; g++) {
    uint8_t* at = out + size_t(g) * groupBytes;
    if (w.type == quant::TensorType::kQ4_K) {
      packQ4_K(w, g, reinterpret_cast<PackedQ4_K*>(at));
    } else if (w.type == quant::TensorType::kQ5_K) {
      packQ5_K(w, g, reinterpret_cast<PackedQ5_K*>(at));
    } else {
      packQ6_K(w, g, reinterpret_cast<PackedQ6_K*>(at));
    }
  }
}

}  // namespace jitllm::cpu
