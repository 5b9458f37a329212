// y = W x for one weight matrix and a few tokens of float32 activations, on the CPU.
//
// Weights stay in their file type (f32, f16, bf16 or a GGUF quant) and are decoded on the fly;
// activations and accumulation stay float32 throughout. We deliberately do not quantize the
// activations to 8 bits as llama.cpp's CPU path does: that is where most of its error against a
// float64 reference comes from, and the weights dominate memory traffic anyway.
//
// Determinism: every (row, token) result is the sum of the products W[r,k] * x[t,k] (W decoded
// exactly as quant::dequantizeRow does) accumulated in one fixed order chosen by the Isa alone.
// It does not depend on how rows are split among threads, nor on how many tokens are multiplied
// together (a decode step and a prefill give the same bits for the same token).
//
// Thread-safety: matmulRows may run on many threads at once (on disjoint row ranges of y). It
// uses a per-thread scratch buffer that grows to 4 decoded rows and is kept for the thread's life.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm/isa.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm::cpu {

// A rows x cols matrix stored row by row in its GGUF type. Not owning.
struct WeightView {
  quant::TensorType type;
  const uint8_t* data;  // row r starts at data + r * rowStride; must be 2-byte aligned
  int64_t rows;
  int64_t cols;      // a multiple of the type's block size
  size_t rowStride;  // bytes, at least rowBytes(type, cols)
  // A hint, never a change to results: the matrix comes from memory at each use (the weights in
  // use do not fit the caches), so decode reads its rows as one sequential stream per thread.
  bool streamed = false;
};

// y[t*yStride + r] = sum_k W[r,k] * x[t*xStride + k], for r in [rowBegin,rowEnd) and t in
// [0,nTokens). Deterministic: the result of a row never depends on rowBegin/rowEnd splitting
// (threads split rows), only on the Isa. `isa` must be supported by this CPU (isaSupported).
// Throws FAILED for a type that cannot be computed or for inconsistent shapes.
void matmulRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                int64_t rowBegin, int64_t rowEnd, Isa isa);

}  // namespace jitllm::cpu
