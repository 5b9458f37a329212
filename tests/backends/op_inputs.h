// Random inputs for op tests on any backend: a seed printed once per run, weight matrices of every
// type with their exact dequantization, and the bound the integer products are held to.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"
#include "kernels/quant/tensor_type.h"
#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

// Every weight type the backends run.
inline constexpr quant::TensorType kWeightTypes[] = {
    quant::TensorType::kF32,  quant::TensorType::kF16,  quant::TensorType::kBF16, quant::TensorType::kQ8_0,
    quant::TensorType::kQ4_0, quant::TensorType::kQ4_1, quant::TensorType::kQ5_0, quant::TensorType::kQ5_1,
    quant::TensorType::kQ4_K, quant::TensorType::kQ5_K, quant::TensorType::kQ6_K,
};

// A fresh seed per run, printed once, so a failure reproduces: JITLLM_TEST_SEED=N fixes it.
inline uint32_t freshSeed() {
  static const uint32_t seed = [] {
    const char* fixed = std::getenv("JITLLM_TEST_SEED");
    const uint32_t s = fixed ? uint32_t(std::strtoul(fixed, nullptr, 10)) : std::random_device{}();
    std::printf("op tests: random seed %u (JITLLM_TEST_SEED=%u reproduces)\n", s, s);
    return s;
  }();
  return seed;
}

// Float types get an odd row length (a partial last chunk); quantized ones two super-blocks.
inline int64_t colsFor(quant::TensorType type) { return quant::typeTraits(type).blockElems == 1 ? 517 : 512; }

struct Matrix {
  quant::TensorType type;
  int64_t rows, cols;
  size_t stride;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;
};

// Rows padded past their bytes: kernels must honour the stride.
inline Matrix randomMatrix(quant::TensorType type, int64_t rows, int64_t cols, uint32_t seed, size_t pad = 8) {
  Matrix m{type, rows, cols, 0, {}, {}};
  m.stride = *quant::rowBytes(type, cols) + pad;
  m.bytes.assign(m.stride * size_t(rows), 0xAB);
  m.dequantized.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; r++) {
    const auto row = randomFloats(size_t(cols), seed + uint32_t(r), 1.0f + float(r % 5), float(r % 3) * 0.5f);
    quant::quantizeRow(type, row.data(), m.bytes.data() + size_t(r) * m.stride, cols);
    quant::dequantizeRow(type, m.bytes.data() + size_t(r) * m.stride, m.dequantized.data() + r * cols, cols);
  }
  return m;
}

// How far a product of quantized weights may be from the float64 sum over the exact dequantized
// weights where a backend computes it on integer dot products: the activations' rounding, at most
// s/512 per element with s <= amax/63.5 of its block of 32 - the numerics contract every integer
// path keeps (kernels/cpu/gemm/matmul_int8.inc, the CUDA and Vulkan matmul_int kernels).
inline double integerRounding(const Matrix& m, const float* x, int64_t row) {
  double rounding = 0;
  for (int64_t k = 0; k < m.cols; k++) {
    float amax = 0;
    for (int64_t i = k / 32 * 32; i < std::min(k / 32 * 32 + 32, m.cols); i++) amax = std::max(amax, std::fabs(x[i]));
    rounding += std::fabs(double(m.dequantized[size_t(row * m.cols + k)])) * amax / (63.5 * 512);
  }
  return rounding;
}

}  // namespace jitllm::testing
