// Reference quantization: float32 rows to the GGUF block layouts of blocks.h.
//
// For the simple types (q4_0, q4_1, q5_0, q5_1, q8_0) the algorithm is ggml's reference
// quantize_row_*_ref (a max- or range-based scale, round to nearest), so files written here match
// llama.cpp's bit for bit. For q4_K / q5_K / q6_K it is ggml's weight-free search (a few trial
// scales and mins per sub-block, least-squares refit), which gives ggml's quality without an
// importance matrix. Used by tools that generate test models and by tests; not a hot path.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/quant/tensor_type.h"

namespace jitllm::quant {

// Encodes n floats of src as a row of `type` into dst (rowBytes(type, n) bytes). n must be a
// multiple of the type's block size; throws FAILED otherwise and UNIMPLEMENTED for a type that is
// not computable.
void quantizeRow(TensorType type, const float* src, void* dst, int64_t n);

// Bytes of a rows x cols matrix of `type`, rows stored back to back; throws FAILED when cols is
// not a multiple of the block size.
size_t quantizedBytes(TensorType type, int64_t rows, int64_t cols);

}  // namespace jitllm::quant
