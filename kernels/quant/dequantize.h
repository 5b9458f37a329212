// Reference dequantization: a row of any computable TensorType to float32.
//
// The values are bit-for-bit those of ggml's reference dequantize_row_* (the same float32
// operations in the same order, no fused multiply-add), so "the weights" mean the same numbers
// here, in llama.cpp and in our float64 reference. The SIMD matrix kernels reproduce them exactly.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "kernels/quant/tensor_type.h"

namespace jitllm::quant {

// Writes n floats decoded from src (a row of `type`, n elements). n must be a multiple of the
// type's block size; throws FAILED otherwise and UNIMPLEMENTED for a type that is not computable.
void dequantizeRow(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace jitllm::quant
