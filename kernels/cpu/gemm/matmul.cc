#include "kernels/cpu/gemm/matmul.h"

#include <cstdlib>
#include <memory>

#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/error.h"

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

}  // namespace detail

void matmulRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                int64_t rowBegin, int64_t rowEnd, Isa isa) {
  const quant::TypeTraits traits = quant::typeTraits(w.type);
  JITLLM_REQUIRE(traits.computable, "matmul: tensor type ", traits.name, " is not supported");
  const std::optional<size_t> rowBytes = quant::rowBytes(w.type, w.cols);
  JITLLM_REQUIRE(w.cols > 0 && rowBytes.has_value(), "matmul: ", w.cols, " columns are not whole ", traits.name,
                 " blocks");
  JITLLM_REQUIRE(w.rowStride >= *rowBytes, "matmul: row stride ", w.rowStride, " is below the ", *rowBytes,
                 " bytes of a ", traits.name, " row");
  JITLLM_REQUIRE(0 <= rowBegin && rowBegin <= rowEnd && rowEnd <= w.rows, "matmul: rows [", rowBegin, ", ", rowEnd,
                 ") are outside the ", w.rows, " of the matrix");
  JITLLM_REQUIRE(nTokens >= 0 && (nTokens <= 1 || xStride >= w.cols), "matmul: ", nTokens,
                 " tokens with activation stride ", xStride, " for ", w.cols, " columns");
  JITLLM_REQUIRE(isaSupported(isa), "matmul: this CPU cannot run ", isaName(isa), " kernels");
  if (rowBegin == rowEnd || nTokens == 0) return;
  switch (isa) {
    case Isa::kScalar:
      return detail::matmulRowsScalar(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx2:
      return detail::matmulRowsAvx2(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512:
      return detail::matmulRowsAvx512(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512Vnni:
      return detail::matmulRowsAvx512Vnni(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
    case Isa::kAvx512Amx:
      return detail::matmulRowsAvx512Amx(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
  }
  JITLLM_FAIL(kFailed, "matmul: unknown Isa ", int(isa));
}

}  // namespace jitllm::cpu
