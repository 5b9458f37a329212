// A check both GPU backends' integer matrix products share (kernels/cuda/kernels/matmul_int.cuh,
// kernels/vulkan/shaders/matmul_int.comp): they quantize an input once for the products that read
// it (q, k and v), so anything that may write that input in between must make the next product
// quantize it again.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/backends/op_inputs.h"
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

// What the producer-quantization tests share (an op that writes the integer form of its output
// for the products after it): a q4_K product of kTokens x kCols inputs, an input x, a norm's
// weight, the producer's output `out` and room for two products' results in `y`.
template <typename GpuDevice>
struct ProducerCheck {
  static constexpr int64_t kRows = 96, kCols = 512, kTokens = 3;

  ProducerCheck(GpuDevice& device, uint32_t seed)
      : gpu(device),
        m(randomMatrix(quant::TensorType::kQ4_K, kRows, kCols, seed + 21)),
        w(gpu.adoptHostBytes(m.bytes.data(), m.bytes.size())),
        gw{quant::TensorType::kQ4_K, w->data(), kRows, kCols, m.stride},
        x(upload(gpu, randomFloats(size_t(kTokens * kCols), seed + 22, 3.0f))),
        norm(upload(gpu, randomFloats(size_t(kCols), seed + 24, 0.2f, 1.0f))),
        out(gpu.allocate(size_t(kTokens * kCols) * 4)),
        y(gpu.allocate(size_t(2 * kTokens * kRows) * 4)) {}

  float* o() { return reinterpret_cast<float*>(out->data()); }
  float* ys() { return reinterpret_cast<float*>(y->data()); }

  // The product of a copy of `produced`, which only the separate quantization can quantize.
  std::vector<float> separately(const DeviceBuffer& produced) {
    Uploaded copy = upload(gpu, download<float>(gpu, produced, size_t(kTokens * kCols)));
    const uint64_t before = gpu.stats().separateQuantizations;
    gpu.matmul(gw, copy.as<float>(), kTokens, ys(), nullptr);
    EXPECT_EQ(before + 1, gpu.stats().separateQuantizations);
    return download<float>(gpu, *y, size_t(kTokens * kRows));
  }

  // Two products read `out` (as q, k and v do) after its producer ran: one fused quantization
  // since the counters read `fused` and `separate` (where a backend counts it: at the producer or
  // at the product), none apart, and the bits of the product of a copy.
  void expectProductsReadTheProducersForm(uint64_t fused, uint64_t separate) {
    gpu.matmul(gw, o(), kTokens, ys(), nullptr);
    gpu.matmul(gw, o(), kTokens, ys() + kTokens * kRows, nullptr);
    EXPECT_EQ(fused + 1, gpu.stats().fusedQuantizations);
    EXPECT_EQ(separate, gpu.stats().separateQuantizations);
    const auto got = download<float>(gpu, *y, size_t(2 * kTokens * kRows));
    const auto want = separately(*out);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
    EXPECT_EQ(0, std::memcmp(got.data() + want.size(), want.data(), want.size() * 4));
  }

  GpuDevice& gpu;
  Matrix m;
  std::unique_ptr<DeviceBuffer> w;
  WeightRef gw;
  Uploaded x, norm;
  std::unique_ptr<DeviceBuffer> out, y;
};

}  // namespace jitllm::testing
