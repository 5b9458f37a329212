// Internal to kernels/cpu/gemm: one matmulRows implementation per Isa, each in its own
// translation unit compiled for that instruction set (see matmul_driver.inc). Callers (only
// matmul.cc) must have checked the arguments and that the CPU supports the variant.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/matmul.h"

namespace jitllm::cpu::detail {

void matmulRowsScalar(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd);
void matmulRowsAvx2(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                    int64_t rowBegin, int64_t rowEnd);
void matmulRowsAvx512(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd);
void matmulRowsAvx512Vnni(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                          int64_t yStride, int64_t rowBegin, int64_t rowEnd);

// Prefill of q4_K / q6_K / q8_0 on AMX tiles (same bits as matmulRowsAvx512Vnni, which it calls
// for everything else).
void matmulRowsAvx512Amx(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                         int64_t yStride, int64_t rowBegin, int64_t rowEnd);

// This thread's scratch of at least `floats` floats, 64-byte aligned. Valid until the next call
// on the same thread; its contents are not preserved across calls.
float* threadScratch(size_t floats);

}  // namespace jitllm::cpu::detail
