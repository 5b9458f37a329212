// The CPU device's packed copies for decode (packed_copies.h, gemm/packed_rows.h): made for
// matrices in adopted buffers at load (prepareKernels) or at their first product, charged to the
// budget and freed with the buffer; never for bytes the device copied in (they could change); skipped, not failed, when
// the budget is full. Every product gives the bits of a device that packs nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/gemm/packed_rows.h"
#include "kernels/quant/quantize.h"

namespace jitllm::cpu {
namespace {

constexpr int64_t kRows = 45, kCols = 512;

std::vector<uint8_t> randomQ4_K(uint32_t seed) {
  const size_t stride = *quant::rowBytes(quant::TensorType::kQ4_K, kCols);
  std::vector<uint8_t> bytes(stride * kRows);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(kCols);
  for (int64_t r = 0; r < kRows; r++) {
    for (float& v : row) v = dist(rng) * float(1 + r % 4) + 0.3f * float(r % 3);
    quant::quantizeRow(quant::TensorType::kQ4_K, row.data(), bytes.data() + size_t(r) * stride, kCols);
  }
  return bytes;
}

WeightRef refTo(const uint8_t* data) {
  return WeightRef{quant::TensorType::kQ4_K, data, kRows, kCols, *quant::rowBytes(quant::TensorType::kQ4_K, kCols)};
}

std::vector<float> product(CpuDevice& device, const WeightRef& w, const std::vector<float>& x, int64_t tokens) {
  std::vector<float> y(size_t(tokens * kRows), NAN);
  device.matmul(w, x.data(), tokens, y.data(), nullptr);
  return y;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The Isas here whose decode reads packed copies (AVX2 and up).
std::vector<Isa> packingIsas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (isaSupported(isa) && packedDecode(isa, quant::TensorType::kQ4_K)) out.push_back(isa);
  }
  return out;
}

CpuDeviceOptions options(Isa isa, bool packed, size_t budget = 0) {
  CpuDeviceOptions o;
  o.isa = isa;
  o.threads = 2;
  o.packedDecode = packed;
  o.memoryBudget = budget;
  return o;
}

TEST(CpuPackedDecode, AnAdoptedMatrixDecodesOnACopyWithItsBitsAndTheCopyGoesWithTheBuffer) {
  const std::vector<uint8_t> weights = randomQ4_K(11);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(3 * kCols);
  for (float& v : x) v = dist(rng);
  if (packingIsas().empty()) GTEST_SKIP() << "no Isa here decodes on packed rows (needs AVX2)";
  for (Isa isa : packingIsas()) {
    SCOPED_TRACE(isaName(isa));
    CpuDevice plain(options(isa, false)), packing(options(isa, true));
    auto plainBuffer = plain.adoptHostBytes(weights.data(), weights.size());
    const size_t before = packing.memoryUsed();
    {
      auto buffer = packing.adoptHostBytes(weights.data(), weights.size());
      EXPECT_EQ(packing.packedBytes(), 0u) << "a copy before any product";
      for (int64_t tokens : {1, 3, 1}) {
        EXPECT_TRUE(sameBits(product(plain, refTo(plainBuffer->data()), x, tokens),
                             product(packing, refTo(buffer->data()), x, tokens)))
            << tokens << " tokens";
      }
      const size_t copy = packedBytes(quant::TensorType::kQ4_K, kRows, kCols);
      EXPECT_EQ(packing.packedBytes(), copy) << "one copy for the matrix, made once";
      EXPECT_EQ(packing.memoryUsed(), before + copy) << "the copy is charged to the budget";
      EXPECT_EQ(plain.packedBytes(), 0u);
      // A view of some of its rows (as phi3's fused matrices are cut) gets its own copy.
      WeightRef firstRows = refTo(buffer->data());
      firstRows.rows = 16;
      std::vector<float> part(16), whole = product(plain, refTo(plainBuffer->data()), x, 1);
      packing.matmul(firstRows, x.data(), 1, part.data(), nullptr);
      EXPECT_EQ(std::memcmp(part.data(), whole.data(), sizeof(float) * 16), 0);
      EXPECT_EQ(packing.packedBytes(), copy + packedBytes(quant::TensorType::kQ4_K, 16, kCols));
    }
    EXPECT_EQ(packing.packedBytes(), 0u) << "the copies outlived their buffer";
    EXPECT_EQ(packing.memoryUsed(), before) << "the copies' bytes were not given back";
  }
}

TEST(CpuPackedDecode, PreparingAModelsKernelsMakesTheCopiesBeforeAnyReply) {
  const std::vector<uint8_t> weights = randomQ4_K(13);
  std::vector<float> x(kCols);
  for (int64_t i = 0; i < kCols; i++) x[size_t(i)] = std::cos(0.1f * float(i));
  if (packingIsas().empty()) GTEST_SKIP() << "no Isa here decodes on packed rows (needs AVX2)";
  for (Isa isa : packingIsas()) {
    SCOPED_TRACE(isaName(isa));
    CpuDevice plain(options(isa, false)), packing(options(isa, true));
    auto plainBuffer = plain.adoptHostBytes(weights.data(), weights.size());
    auto buffer = packing.adoptHostBytes(weights.data(), weights.size());
    KernelWorkload workload;
    workload.products = {{refTo(buffer->data())}};
    EXPECT_EQ(packing.prepareKernels(workload), 0u);
    const size_t copy = packedBytes(quant::TensorType::kQ4_K, kRows, kCols);
    EXPECT_EQ(packing.packedBytes(), copy) << "no copy made at load";
    EXPECT_TRUE(
        sameBits(product(plain, refTo(plainBuffer->data()), x, 1), product(packing, refTo(buffer->data()), x, 1)));
    EXPECT_EQ(packing.packedBytes(), copy) << "a second copy at the first product";
  }
}

TEST(CpuPackedDecode, BytesCopiedInAndAFullBudgetGetNoCopyAndTheSameBits) {
  const std::vector<uint8_t> weights = randomQ4_K(12);
  std::vector<float> x(kCols, 0.5f);
  for (int64_t i = 0; i < kCols; i++) x[size_t(i)] = std::sin(float(i));
  if (packingIsas().empty()) GTEST_SKIP() << "no Isa here decodes on packed rows (needs AVX2)";
  for (Isa isa : packingIsas()) {
    SCOPED_TRACE(isaName(isa));
    CpuDevice plain(options(isa, false));
    auto plainBuffer = plain.adoptHostBytes(weights.data(), weights.size());
    const std::vector<float> want = product(plain, refTo(plainBuffer->data()), x, 1);

    // Copied into a buffer of the device's own: its bytes may be written again, so no copy.
    CpuDevice packing(options(isa, true));
    auto owned = packing.allocate(weights.size());
    packing.copyFromHost(owned->data(), weights.data(), weights.size());
    EXPECT_TRUE(sameBits(want, product(packing, refTo(owned->data()), x, 1)));
    EXPECT_EQ(packing.packedBytes(), 0u);

    // A budget with no room for the copy: the file layout's kernels, and no second try.
    CpuDevice full(options(isa, true, 1));
    auto adopted = full.adoptHostBytes(weights.data(), weights.size());
    for (int i = 0; i < 2; i++) EXPECT_TRUE(sameBits(want, product(full, refTo(adopted->data()), x, 1)));
    EXPECT_EQ(full.packedBytes(), 0u);
    EXPECT_EQ(full.memoryUsed(), 0u);
  }
}

}  // namespace
}  // namespace jitllm::cpu
