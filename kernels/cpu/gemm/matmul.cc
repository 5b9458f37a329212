#include "kernels/cpu/gemm/matmul.h"

#include <cstdlib>
#include <memory>

#include "base/error.h"
#include "kernels/cpu/gemm/matmul_variants.h"

namespace jitllm::cpu {

namespace detail {

float* threadScratch(size_t floats) {
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, FreeDeleter> buffer;
  thread_local size_t capacity = 0;
  if (floats > capacity) {
    // 64-byte alignment keeps every vector load of a decoded row inside one cache line.
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) JITLLM_FAIL(kOverloaded, "matmul: no memory for ", bytes, " bytes of scratch");
    buffer.reset(p);
    capacity = bytes / sizeof(float);
  }
  return buffer.get();
}

QuantizedInput threadQuantizedInput(const float* x, int64_t xStride, int64_t nTokens, int64_t cols, int form,
                                    uint64_t epoch, size_t bytes) {
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  struct Kept {
    const float* x = nullptr;
    int64_t xStride = 0, nTokens = 0, cols = 0;
    int form = -1;
    uint64_t epoch = 0;
    std::unique_ptr<uint8_t, FreeDeleter> data;
    size_t capacity = 0;
  };
  thread_local Kept kept;
  if (epoch != 0 && kept.epoch == epoch && kept.x == x && kept.xStride == xStride && kept.nTokens == nTokens &&
      kept.cols == cols && kept.form == form && kept.capacity >= bytes) {
    return {kept.data.get(), true};
  }
  if (bytes > kept.capacity) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    if (p == nullptr) JITLLM_FAIL(kOverloaded, "matmul: no memory for ", rounded, " bytes of activations");
    kept.data.reset(p);
    kept.capacity = rounded;
  }
  kept.x = x;
  kept.xStride = xStride;
  kept.nTokens = nTokens;
  kept.cols = cols;
  kept.form = form;
  kept.epoch = epoch;
  return {kept.data.get(), false};
}

void matmulRowsInt8(const Int8Kernels256& kernels, const WeightView& w, const float* x, int64_t xStride,
                    int64_t nTokens, float* y, int64_t yStride, int64_t rowBegin, int64_t rowEnd) {
  if (!kernels.rows(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd, /*promptForm=*/false)) {
    matmulRowsAvx2(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
}

}  // namespace detail

namespace {

// The checks every product starts with: a computable type, whole blocks, rows inside the matrix.
void requireWeightsAndRows(const WeightView& w, int64_t rowBegin, int64_t rowEnd) {
  const quant::TypeTraits traits = quant::typeTraits(w.type);
  JITLLM_REQUIRE(traits.computable, "matmul: tensor type ", traits.name, " is not supported");
  const std::optional<size_t> rowBytes = quant::rowBytes(w.type, w.cols);
  JITLLM_REQUIRE(w.cols > 0 && rowBytes.has_value(), "matmul: ", w.cols, " columns are not whole ", traits.name,
                 " blocks");
  JITLLM_REQUIRE(w.rowStride >= *rowBytes, "matmul: row stride ", w.rowStride, " is below the ", *rowBytes,
                 " bytes of a ", traits.name, " row");
  JITLLM_REQUIRE(0 <= rowBegin && rowBegin <= rowEnd && rowEnd <= w.rows, "matmul: rows [", rowBegin, ", ", rowEnd,
                 ") are outside the ", w.rows, " of the matrix");
}

}  // namespace

void matmulRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                int64_t rowBegin, int64_t rowEnd, Isa isa) {
  requireWeightsAndRows(w, rowBegin, rowEnd);
  JITLLM_REQUIRE(nTokens >= 0 && (nTokens <= 1 || xStride >= w.cols), "matmul: ", nTokens,
                 " tokens with activation stride ", xStride, " for ", w.cols, " columns");
  JITLLM_REQUIRE(isaSupported(isa), "matmul: this CPU cannot run ", isaName(isa), " kernels");
  if (rowBegin == rowEnd || nTokens == 0) return;
  switch (isa) {
    case Isa::kScalar:
      return detail::matmulRowsScalar(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx2:
      return detail::matmulRowsInt8(detail::kInt8Avx2, w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvxVnni:
      return detail::matmulRowsInt8(detail::kInt8AvxVnni, w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512:
      return detail::matmulRowsAvx512(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512Vnni:
      return detail::matmulRowsAvx512Vnni(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512Bf16:
      return detail::matmulRowsAvx512Bf16(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512Amx:
      // The tile unit multiplies integers only: BF16 weights take kAvx512Bf16's kernels.
      if (w.type == quant::TensorType::kBF16) {
        return detail::matmulRowsAvx512Bf16(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
      }
      return detail::matmulRowsAvx512Amx(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
  JITLLM_FAIL(kFailed, "matmul: unknown Isa ", int(isa));
}

namespace {

// Which compile of the 256-bit kernels runs an Isa's prompt products: one set of bits on every Isa
// (the integer sums are exact however they are made), with vpdpbusd where the Isa has it - the
// AVX-512 paths in its EVEX form where the CPU has AVX-512 VNNI. kAvx2 stays on vpmaddubsw even
// on a CPU with more, as its ordinary products do.
const detail::Int8Kernels256& promptKernels(Isa isa) {
  if (isa == Isa::kAvx2) return detail::kInt8Avx2;
  if (isa == Isa::kAvxVnni) return detail::kInt8AvxVnni;
  if (isaSupported(Isa::kAvx512Vnni)) return detail::kInt8NarrowVnni;
  if (isaSupported(Isa::kAvxVnni)) return detail::kInt8AvxVnni;
  return detail::kInt8Avx2;
}

// Makes `buffer` (64-byte aligned, owned) hold at least `bytes`, keeping a larger one as it is.
void growAligned(uint8_t*& buffer, size_t& capacity, size_t bytes, const char* what) {
  if (bytes <= capacity) return;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (p == nullptr) JITLLM_FAIL(kOverloaded, "matmul: no memory for ", bytes, " bytes of ", what);
  std::free(buffer);
  buffer = p;
  capacity = bytes;
}

void requirePromptPath(const WeightView& w, Isa isa) {
  JITLLM_REQUIRE(promptRowsOnBytes(isa, w.type), "matmul: ", isaName(isa), " has no prompt path for ",
                 quant::typeTraits(w.type).name);
}

}  // namespace

bool promptRowsOnBytes(Isa isa, quant::TensorType type) {
  using quant::TensorType;
  if (!isaSupported(isa) || isa == Isa::kScalar) return false;
  if (isa == Isa::kAvx512Amx && detail::amxMultiplies(type)) return false;  // on the tiles already
  switch (type) {
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kQ4_0:
    case TensorType::kQ5_0:
      return true;  // every other Isa runs AVX2 (an AVX-512 CPU has it)
    case TensorType::kQ8_0:
      return &promptKernels(isa) != &detail::kInt8Avx2;  // byte vectors need vpdpbusd
    default:
      return false;
  }
}

void matmulPromptRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd, Isa isa) {
  requireWeightsAndRows(w, rowBegin, rowEnd);
  JITLLM_REQUIRE(nTokens >= 0 && (nTokens <= 1 || xStride >= w.cols), "matmul: ", nTokens,
                 " tokens with activation stride ", xStride, " for ", w.cols, " columns");
  requirePromptPath(w, isa);
  if (rowBegin == rowEnd || nTokens == 0) return;
  promptKernels(isa).rows(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd, /*promptForm=*/true);
}

PromptActivations::PromptActivations() = default;
PromptActivations::~PromptActivations() { std::free(data_); }

int64_t PromptActivations::reset(Isa isa, int64_t nTokens, int64_t cols) {
  JITLLM_REQUIRE(nTokens > 0 && cols > 0 && cols % 32 == 0, "matmul: cannot lay out ", nTokens, " prompt tokens of ",
                 cols, " columns");
  JITLLM_REQUIRE(isaSupported(isa) && isa != Isa::kScalar, "matmul: ", isaName(isa), " has no prompt path");
  const int64_t groups = (nTokens + 7) / 8;
  growAligned(data_, capacity_, size_t(groups) * promptKernels(isa).promptGroupBytes(cols), "prompt activations");
  isa_ = isa;
  tokens_ = nTokens;
  cols_ = cols;
  return groups;
}

void PromptActivations::layOut(const float* x, int64_t xStride, int64_t groupBegin, int64_t groupEnd) {
  promptKernels(isa_).promptLayOut(x, xStride, tokens_, cols_, data_, groupBegin, groupEnd);
}

void matmulPromptRowsPrepared(const WeightView& w, const PromptActivations& x, float* y, int64_t yStride,
                              int64_t rowBegin, int64_t rowEnd) {
  requireWeightsAndRows(w, rowBegin, rowEnd);
  requirePromptPath(w, x.isa());
  JITLLM_REQUIRE(x.cols() == w.cols && x.tokens() > 0, "matmul: prompt activations of ", x.tokens(), " x ", x.cols(),
                 " do not fit a product of ", w.cols, " columns");
  if (rowBegin == rowEnd) return;
  promptKernels(x.isa()).promptRowsPrepared(w, x.data(), x.tokens(), y, yStride, rowBegin, rowEnd);
}

bool PreparedActivations::wanted(Isa isa, quant::TensorType type, int64_t nTokens) {
  return isa == Isa::kAvx512Amx && isaSupported(isa) && nTokens >= detail::kAmxMinTokens && detail::amxMultiplies(type);
}

PreparedActivations::PreparedActivations() = default;
PreparedActivations::~PreparedActivations() { std::free(tiles_); }

int64_t PreparedActivations::reset(int64_t nTokens, int64_t cols) {
  JITLLM_REQUIRE(nTokens > 0 && cols > 0 && cols % 32 == 0, "matmul: cannot prepare ", nTokens, " tokens of ", cols,
                 " columns");
  const int64_t nTiles = (nTokens + detail::kAmxTile - 1) / detail::kAmxTile;
  growAligned(tiles_, capacity_, size_t(nTiles) * detail::amxTokenTileBytes(cols), "prepared activations");
  tokens_ = nTokens;
  cols_ = cols;
  return nTiles;
}

void PreparedActivations::layOut(const float* x, int64_t xStride, int64_t tileBegin, int64_t tileEnd) {
  detail::amxLayOutTokens(x, xStride, tokens_, cols_, tiles_, tileBegin, tileEnd);
}

void matmulRowsPrepared(const WeightView& w, const PreparedActivations& x, float* y, int64_t yStride, int64_t rowBegin,
                        int64_t rowEnd, Isa isa) {
  JITLLM_REQUIRE(PreparedActivations::wanted(isa, w.type, x.tokens()) && x.cols() == w.cols,
                 "matmul: prepared activations of ", x.tokens(), " x ", x.cols(), " do not fit a ",
                 quant::typeTraits(w.type).name, " product of ", w.cols, " columns on ", isaName(isa));
  requireWeightsAndRows(w, rowBegin, rowEnd);
  if (rowBegin == rowEnd) return;
  detail::matmulRowsAmxPrepared(w, x.tiles(), x.tokens(), y, yStride, rowBegin, rowEnd);
}

}  // namespace jitllm::cpu
