// What only the Vulkan backend has, on fresh random inputs: its integer products with and without
// the dot-product extension, producers that quantize, tuned product shapes, subgroup shuffles,
// attention spread over workgroups; and gemma3's GEGLU and sliding-window attention. The ops every backend has are in
// the conformance suite (tests/backends/conformance_test.cc).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"
#include "tests/backends/op_inputs.h"
#include "tests/gpu/gemma_op_checks.h"
#include "tests/gpu/integer_product_checks.h"
#include "tests/gpu/long_context.h"
#include "tests/vulkan/vulkan_test_support.h"

namespace jitllm::testing {
namespace {

using quant::TensorType;

class VulkanOps : public GpuOpsTest<VulkanTraits> {};

// The integer kernels (q4_K, q6_K) against the float ones on the same device, with the device's
// dot product instructions and spelt out; and the quantized input q, k and v share is quantized
// again after anything writes it (tests/gpu/integer_product_checks.h).
TEST_F(VulkanOps, IntegerProductsMatchTheFloatKernelsAndRequantizeAWrittenInput) {
  vulkan::VulkanDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.settings.integerMatmul = false;
  auto floats = vulkan::VulkanDevice::create(o);
  // And the integer kernels with their dot products spelt out, where the device has instructions:
  // the same integers, so the same bits.
  o.settings.integerMatmul = true;
  o.settings.integerDotProduct = false;
  auto spelt = vulkan::VulkanDevice::create(o);
  std::printf("%s: integer dot product instructions: %s\n", gpu->info().id.str().c_str(),
              gpu->usesIntegerDotProduct() ? "yes" : "no (spelt out)");
  constexpr int64_t kRows = 64, kCols = 512;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(quant::typeName(type)));
    const Matrix m = randomMatrix(type, kRows, kCols, freshSeed() + 11 * uint32_t(type));
    auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    auto wf = floats->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef gw{type, w->data(), kRows, kCols, m.stride};
    // The integer kernels against the float ones, and their dot products spelt out.
    const auto alone = [&](Device& dev, const WeightRef& wr) {
      auto x = upload(dev, randomFloats(size_t(kCols), freshSeed() + 1));
      auto y = dev.allocate(size_t(wr.rows) * 4);
      dev.matmul(wr, x.as<float>(), 1, reinterpret_cast<float*>(y->data()), nullptr);
      return download<float>(dev, *y, size_t(wr.rows));
    };
    const auto got = alone(*gpu, gw);
    const double error = nmse(got, alone(*floats, WeightRef{type, wf->data(), kRows, kCols, m.stride}));
    EXPECT_LT(error, 1e-8);
    EXPECT_GT(error, 0.0) << "the integer kernels did not run";
    auto ws0 = spelt->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const auto spelt0 = alone(*spelt, WeightRef{type, ws0->data(), kRows, kCols, m.stride});
    EXPECT_EQ(0, std::memcmp(spelt0.data(), got.data(), got.size() * 4)) << "spelt-out dot products";

    const Matrix sq = randomMatrix(type, kCols, kCols, freshSeed() + 5);
    auto ws = gpu->adoptHostBytes(sq.bytes.data(), sq.bytes.size());
    expectWrittenInputsQuantizedAgain(*gpu, gw, WeightRef{type, ws->data(), kCols, kCols, sq.stride}, freshSeed());
  }
}

// rmsNorm and attention write their output's integer form for the products after it (QUANTIZE in
// rms_norm.comp and attention.comp): the same bytes quantize_x would write, so the products' bits
// do not depend on which ran. An in-place norm (whose fused part would read overwritten inputs)
// leaves it to quantize_x.
TEST_F(VulkanOps, ProducersQuantizeTheirOutputForTheProductsAfterItWithQuantizeXsBits) {
  ProducerCheck<vulkan::VulkanDevice> p(*gpu, freshSeed());
  constexpr int64_t kTokens = p.kTokens, kCols = p.kCols, kRows = p.kRows;
  auto& x = p.x;
  auto& norm = p.norm;
  float* o = p.o();
  float* ys = p.ys();
  // `produce` writes `o`; then two products read it.
  const auto check = [&](const std::function<void()>& produce) {
    const uint64_t fused = gpu->stats().fusedQuantizations, separate = gpu->stats().separateQuantizations;
    produce();  // the fused quantization counts here
    p.expectProductsReadTheProducersForm(fused, separate);
  };
  {
    SCOPED_TRACE("rmsNorm");
    check([&] { gpu->rmsNorm(x.as<float>(), norm.as<float>(), o, kTokens, kCols, 1e-5f); });
  }
  // 8 heads of 64 = kCols. Three tokens over 300 positions: few workgroups, so the chunks run
  // apart and are folded after (MODE 1 + 2); over 30 positions one workgroup per head (MODE 0).
  LongContext ctx(*gpu, *cpu, KvLayout{16, 2, 64, KvPrecision::kF32}, 300, freshSeed() + 25);
  auto q = upload(*gpu, randomFloats(size_t(kTokens * kCols), freshSeed() + 26, 0.3f));
  for (const std::vector<int32_t>& positions : {std::vector<int32_t>{299, 150, 70}, std::vector<int32_t>{9, 20, 30}}) {
    SCOPED_TRACE("attention at " + std::to_string(positions[0]));
    check([&] { ctx.attendOnGpu(q.as<float>(), o, positions, 8, 0.125f); });
  }

  // In place: not fused, and the product still reads the norm's output.
  gpu->rmsNorm(x.as<float>(), norm.as<float>(), x.as<float>(), kTokens, kCols, 1e-5f);
  const uint64_t fusedBefore = gpu->stats().fusedQuantizations, separateBefore = gpu->stats().separateQuantizations;
  gpu->matmul(p.gw, x.as<float>(), kTokens, ys, nullptr);
  EXPECT_EQ(fusedBefore, gpu->stats().fusedQuantizations);
  EXPECT_EQ(separateBefore + 1, gpu->stats().separateQuantizations);
  const auto inPlace = download<float>(*gpu, *p.y, size_t(kTokens * kRows));
  EXPECT_EQ(0, std::memcmp(inPlace.data(), p.separately(*x.buffer).data(), inPlace.size() * 4));
}

// Product shapes are timed once per (device, kernel, shape) and the choice is remembered on disk
// (matmul_tuner.h): the tuned device gives the untuned one's bits, and the next device with the
// same cache directory times nothing.
TEST_F(VulkanOps, ProductShapesAreTunedOnceRememberedOnDiskAndKeepTheBits) {
  const auto root = std::filesystem::temp_directory_path() / ("jitllm-vk-tune-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  const auto device = [&](bool tune) {
    vulkan::VulkanDeviceOptions o;
    o.cacheRoot = tune ? root.string() : JITLLM_TEST_KERNEL_CACHE;
    o.settings.tune = tune;
    return vulkan::VulkanDevice::create(o);
  };
  if (device(true)->physical().timestampPeriodNs == 0) GTEST_SKIP() << gpu->info().id << " has no timestamps";
  constexpr int64_t kRows = 40, kCols = 512;
  const Matrix q4 = randomMatrix(TensorType::kQ4_K, kRows, kCols, freshSeed() + 51);
  const Matrix q8 = randomMatrix(TensorType::kQ8_0, kRows, kCols, freshSeed() + 52);
  const auto xHost = randomFloats(size_t(3 * kCols), freshSeed() + 53);
  // Both matrices at 1 and 3 tokens, and an integer product over its own input (which it can
  // repeat: it reads the quantized copy): five shapes.
  const auto products = [&](vulkan::VulkanDevice& dev) {
    std::vector<float> all;
    for (const Matrix* m : {&q4, &q8}) {
      auto w = dev.adoptHostBytes(m->bytes.data(), m->bytes.size());
      const WeightRef ref{m->type, w->data(), kRows, kCols, m->stride};
      for (int64_t tokens : {1, 3}) {
        auto x = upload(dev, xHost);
        auto y = dev.allocate(size_t(tokens * kRows) * 4);
        dev.matmul(ref, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()), nullptr);
        const auto got = download<float>(dev, *y, size_t(tokens * kRows));
        all.insert(all.end(), got.begin(), got.end());
      }
    }
    auto square = randomMatrix(TensorType::kQ4_K, kCols, kCols, freshSeed() + 54);
    auto w = dev.adoptHostBytes(square.bytes.data(), square.bytes.size());
    auto x = upload(dev, xHost);
    dev.matmul(WeightRef{square.type, w->data(), kCols, kCols, square.stride}, x.as<float>(), 2, x.as<float>(),
               nullptr);
    const auto inPlace = download<float>(dev, *x.buffer, size_t(2 * kCols));
    all.insert(all.end(), inPlace.begin(), inPlace.end());
    return all;
  };
  auto untuned = device(false);
  const auto want = products(*untuned);
  EXPECT_EQ(0u, untuned->stats().matmulTunings);
  auto first = device(true);
  const auto tuned = products(*first);
  EXPECT_EQ(5u, first->stats().matmulTunings);
  EXPECT_EQ(0, std::memcmp(tuned.data(), want.data(), want.size() * 4));
  std::ifstream file(first->cacheDirectory() + "/" + vulkan::MatmulTuner::kFile);
  std::string line;
  int lines = 0;
  while (std::getline(file, line)) lines++;
  EXPECT_EQ(5, lines);
  auto second = device(true);
  const auto again = products(*second);
  EXPECT_EQ(0u, second->stats().matmulTunings);
  EXPECT_EQ(0, std::memcmp(again.data(), want.data(), want.size() * 4));
  std::filesystem::remove_all(root);
}

// Subgroup shuffles take over the reductions' narrower levels (shaders/lane_sums.glsl) and must
// give the shared-memory tree's bits: on lavapipe (8-wide subgroups) the two are mixed, on a
// 32-wide GPU the shuffles do it all.
TEST_F(VulkanOps, SubgroupShufflesGiveTheBitsOfTheSharedMemoryTree) {
  if (!gpu->physical().subgroupShuffle) GTEST_SKIP() << gpu->info().id << " has no subgroup shuffles";
  std::printf("%s: subgroups of %u\n", gpu->info().id.str().c_str(), gpu->physical().subgroupSize);
  vulkan::VulkanDeviceOptions options;
  options.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  options.settings.subgroupShuffle = false;
  auto tree = vulkan::VulkanDevice::create(options);
  constexpr int64_t kRows = 37, kCols = 512, kTokens = 5;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(quant::typeName(type)));
    const Matrix m = randomMatrix(type, kRows, kCols, freshSeed() + 31 * uint32_t(type));
    const auto xHost = randomFloats(size_t(kTokens * kCols), freshSeed() + 32);
    const auto product = [&](Device& dev, int64_t tokens) {
      auto w = dev.adoptHostBytes(m.bytes.data(), m.bytes.size());
      auto x = upload(dev, xHost);
      auto y = dev.allocate(size_t(tokens * kRows) * 4);
      dev.matmul(WeightRef{type, w->data(), kRows, kCols, m.stride}, x.as<float>(), tokens,
                 reinterpret_cast<float*>(y->data()), nullptr);
      return download<float>(dev, *y, size_t(tokens * kRows));
    };
    for (int64_t tokens : {int64_t(1), kTokens}) {
      const auto shuffled = product(*gpu, tokens);
      EXPECT_EQ(0, std::memcmp(shuffled.data(), product(*tree, tokens).data(), shuffled.size() * 4)) << tokens;
    }
  }
}

// A long context with few (head, token) workgroups spreads each token's 64-position chunks over
// workgroups and folds them after (attention.comp MODE 1 + 2); with many tokens one workgroup
// per head and token folds as it goes (MODE 0). Same operations in the same order: same bits.
TEST_F(VulkanOps, AttentionChunksSpreadOverWorkgroupsGiveTheBitsOfOneWorkgroupPerToken) {
  LongContext ctx(*gpu, *cpu, KvLayout{16, 2, 64, KvPrecision::kF32}, 300, freshSeed() + 40);
  const int heads = 8;
  const std::vector<int32_t> positions = {ctx.length() - 1, 0, 63, 64, 200};  // 5 x 8 = 40 workgroups
  const auto q = randomFloats(positions.size() * heads * 64, freshSeed() + 42, 0.3f);
  ctx.expectChunkedAndWholeAgree(q, positions, heads, 0.125f, 8);  // 40 x 8 = 320 workgroups
}

// GEGLU (geglu.comp) against float64, out of place and in place: a length that leaves the last
// workgroup part-filled (and the grid-stride loop more than one round), and one shorter than a
// workgroup.
TEST_F(VulkanOps, GegluMatchesAFloat64ReferenceInPlaceAndOut) {
  expectGegluMatchesFloat64(*gpu, 100003, freshSeed());
  expectGegluMatchesFloat64(*gpu, 37, freshSeed() + 7);
}

// A sliding window (attention.comp's window) reads only its positions - pages before it are null,
// positions before it on its first page NaN - and gives the bits of a context holding just those
// positions, in decode (chunks in workgroups of their own, MODE 1 + 2) and prefill (MODE 0); a
// window no context reaches gives window 0's bits. fp32 and fp16 pages.
TEST_F(VulkanOps, SlidingWindowAttentionReadsOnlyItsPositionsWithTheBitsOfAContextOfThem) {
  for (KvPrecision precision : {KvPrecision::kF32, KvPrecision::kF16}) {
    SCOPED_TRACE(precision == KvPrecision::kF16 ? "fp16 pages" : "fp32 pages");
    expectSlidingWindowsAttendOnlyTheirPositions(*gpu, *cpu, precision, freshSeed() + 60);
  }
}

}  // namespace
}  // namespace jitllm::testing
