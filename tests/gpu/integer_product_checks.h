// A check both GPU backends' integer matrix products share (kernels/cuda/kernels/matmul_int.cuh,
// kernels/vulkan/shaders/matmul_int.comp): they quantize an input once for the products that read
// it (q, k and v), so anything that may write that input in between must make the next product
// quantize it again.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

// On `gpu`, with no synchronisation in between (as in a step's queue): product, the same product
// again, an op writing the input, product, a copy writing it, product - each result bit for bit
// the product of that input computed alone. Then a square product (w.cols x w.cols) written over
// its own input, twice: the second reads the first's output. w and square are on `gpu`.
inline void expectWrittenInputsQuantizedAgain(Device& gpu, const WeightRef& w, const WeightRef& square, uint32_t seed) {
  const int64_t rows = w.rows, cols = w.cols;
  const auto alone = [&](const WeightRef& m, const std::vector<float>& xHost) {
    auto x = upload(gpu, xHost);
    auto y = gpu.allocate(size_t(m.rows) * 4);
    gpu.matmul(m, x.as<float>(), 1, reinterpret_cast<float*>(y->data()), nullptr);
    return download<float>(gpu, *y, size_t(m.rows));
  };
  const auto x0 = randomFloats(size_t(cols), seed + 1), d = randomFloats(size_t(cols), seed + 2);
  const auto x2 = randomFloats(size_t(cols), seed + 3);
  std::vector<float> x1(x0.size());
  for (size_t i = 0; i < x1.size(); i++) x1[i] = x0[i] + d[i];
  const auto want0 = alone(w, x0), want1 = alone(w, x1), want2 = alone(w, x2);
  ASSERT_NE(0, std::memcmp(want0.data(), want1.data(), want0.size() * 4));

  auto x = upload(gpu, x0);
  auto dd = upload(gpu, d);
  auto y = gpu.allocate(size_t(4 * rows) * 4);
  auto* ys = reinterpret_cast<float*>(y->data());
  gpu.matmul(w, x.as<float>(), 1, ys, nullptr);
  gpu.matmul(w, x.as<float>(), 1, ys + rows, nullptr);  // the same input: reused
  gpu.add(x.as<float>(), dd.as<float>(), cols);         // an op writes it
  gpu.matmul(w, x.as<float>(), 1, ys + 2 * rows, nullptr);
  gpu.copyFromHost(x.buffer->data(), x2.data(), x2.size() * 4);  // a copy writes it
  gpu.matmul(w, x.as<float>(), 1, ys + 3 * rows, nullptr);
  const auto got = download<float>(gpu, *y, size_t(4 * rows));
  EXPECT_EQ(0, std::memcmp(got.data(), want0.data(), want0.size() * 4));
  EXPECT_EQ(0, std::memcmp(got.data() + rows, want0.data(), want0.size() * 4));
  EXPECT_EQ(0, std::memcmp(got.data() + 2 * rows, want1.data(), want1.size() * 4));
  EXPECT_EQ(0, std::memcmp(got.data() + 3 * rows, want2.data(), want2.size() * 4));

  auto xa = upload(gpu, x0);
  float* xp = xa.as<float>();
  gpu.matmul(square, xp, 1, xp, nullptr);
  const auto mid = download<float>(gpu, *xa.buffer, size_t(cols));
  gpu.matmul(square, xp, 1, xp, nullptr);
  const auto twice = download<float>(gpu, *xa.buffer, size_t(cols));
  EXPECT_EQ(0, std::memcmp(twice.data(), alone(square, mid).data(), twice.size() * 4));
}

}  // namespace jitllm::testing
