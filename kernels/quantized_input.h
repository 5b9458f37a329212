// The integer form of a matrix product's input, as the GPU backends' integer kernels read it
// (kernels/cuda/kernels/quantize_x.cuh and kernels/vulkan/shaders/quantize_x.comp write the same
// layout): the size of a token's row, and which input a device's scratch buffer holds.
//
// Thread-safety: plain values; a device keeps its QuantizedInput for its executor thread only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jitllm {

// Bytes of one token's row of K columns (K a multiple of 32):
// a[K] | b[K] | s256[K/32] floats | bsum[K/32] floats | sum8[K/8] ints.
inline constexpr int64_t quantizedRowBytes(int64_t k) { return 2 * k + k / 8 + k / 8 + k / 2; }

// Which float input (tokens x cols at x) a device's quantized scratch holds, while nothing that
// could have written that input has been queued since. Empty ({}) when it holds none.
struct QuantizedInput {
  const float* x = nullptr;
  int64_t tokens = 0, cols = 0;

  bool holds(const float* input, int64_t inputTokens, int64_t inputCols) const {
    return x == input && tokens == inputTokens && cols == inputCols;
  }
  // After a product wrote `bytes` at y: forgets the input if y overlapped it (a product writing
  // over its own input).
  void forgetIfWritten(const void* y, size_t bytes) {
    const auto* in = reinterpret_cast<const uint8_t*>(x);
    const auto* out = static_cast<const uint8_t*>(y);
    if (x && out < in + size_t(tokens * cols) * sizeof(float) && in < out + bytes) *this = {};
  }
};

}  // namespace jitllm
