// What only the CUDA backend has, on fresh random inputs: tensor-core prefill, fused producers,
// products grouped into one launch, blocks moved between CUDA devices; and gemma3's GEGLU and
// sliding-window attention through every attention kernel. The ops every backend has
// are in the conformance suite (tests/backends/conformance_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <tuple>

#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"
#include "tests/backends/op_inputs.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/gpu/gemma_op_checks.h"
#include "tests/gpu/integer_product_checks.h"

namespace jitllm::testing {
namespace {

using quant::TensorType;

class CudaOps : public GpuOpsTest<CudaTraits> {};

// q4_K prefill on tensor cores (matmul_int.cuh's JL_MMA) has the dp4a kernels' bits, which are
// decode's: every token of a batch as computed alone. Rows that end mid-warp and tokens that end
// mid-tile, 32 lane slots (2048), 16 (3072) and fewer units than slots (256), and a bias.
TEST_F(CudaOps, TensorCorePrefillGivesTheBitsOfTheDp4aKernelsAndOfDecode) {
  if (gpu->computeCapability() < 80) GTEST_SKIP() << gpu->info().name << ": int8 mma needs sm_80 or later";
  cuda::CudaDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.settings.tensorCores = false;
  auto dp4a = cuda::CudaDevice::create(o);
  // Both block widths of the tensor-core kernel (tokens > 32 take the wider; 37 tokens: a partial
  // block either way).
  o.settings.tensorCores = true;
  o.settings.tensorCoreTokens = 64;
  auto wideMma = cuda::CudaDevice::create(o);
  o.settings.tensorCoreTokens = 32;
  auto narrowMma = cuda::CudaDevice::create(o);
  // And every tile height (4 row warps: prefill's 64 rows; 2 and 1: decode batches'), which the
  // device otherwise picks by the product's size.
  std::vector<std::pair<std::string, std::unique_ptr<cuda::CudaDevice>>> others;
  others.emplace_back("64 tokens a block", std::move(wideMma));
  others.emplace_back("32 tokens a block", std::move(narrowMma));
  for (int warps : {4, 2, 1}) {
    o.settings.tensorCoreRowWarps = warps;
    others.emplace_back(std::to_string(16 * warps) + " rows x 32 tokens a block", cuda::CudaDevice::create(o));
  }
  o.settings.tensorCoreTokens = 64;
  o.settings.tensorCoreRowWarps = 2;
  others.emplace_back("32 rows x 64 tokens a block", cuda::CudaDevice::create(o));
  // 101 rows: a partial tile of rows; the copy on the GPU ends with the last row (no reads past
  // it). q4_K rows padded to stay 16-byte aligned, which its kernel needs; q6_K rows 2 bytes apart
  // from whole blocks, so their blocks start at either alignment its kernel takes (2 or 4 mod 4),
  // and with 256 columns the last block is 4-byte aligned: its d's word would run past the copy.
  constexpr int64_t kRows = 101;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K})
    for (int64_t cols : {2048, 3072, 256}) {
      const size_t pad = type == TensorType::kQ4_K ? 16 : 2;
      const Matrix m = randomMatrix(type, kRows, cols, freshSeed() + uint32_t(cols) + 7 * uint32_t(type), pad);
      const size_t bytes = m.stride * size_t(kRows - 1) + *quant::rowBytes(type, cols);
      const auto biasHost = randomFloats(size_t(kRows), freshSeed() + 61);
      for (int64_t tokens : {32, 37}) {
        SCOPED_TRACE(std::string(quant::typeName(type)) + ", " + std::to_string(cols) + " columns, " +
                     std::to_string(tokens) + " tokens");
        const auto xHost = randomFloats(size_t(tokens * cols), freshSeed() + uint32_t(tokens), 2.0f);
        const auto product = [&](cuda::CudaDevice& dev, int64_t first, int64_t n) {
          auto w = dev.adoptHostBytes(m.bytes.data(), bytes);
          auto x = upload(dev, xHost);
          auto bias = upload(dev, biasHost);
          auto y = dev.allocate(size_t(n * kRows) * 4);
          dev.matmul(WeightRef{type, w->data(), kRows, cols, m.stride}, x.as<float>() + first * cols, n,
                     reinterpret_cast<float*>(y->data()), bias.as<float>());
          return download<float>(dev, *y, size_t(n * kRows));
        };
        const uint64_t before = gpu->stats().tensorCoreProducts;
        const auto mma = product(*gpu, 0, tokens);
        ASSERT_EQ(before + 1, gpu->stats().tensorCoreProducts) << "the tensor-core kernel did not run";
        const auto want = product(*dp4a, 0, tokens);
        ASSERT_EQ(0u, dp4a->stats().tensorCoreProducts);
        EXPECT_EQ(0, std::memcmp(mma.data(), want.data(), want.size() * 4));
        for (const auto& [tile, other] : others) {
          const uint64_t otherBefore = other->stats().tensorCoreProducts;
          const auto same = product(*other, 0, tokens);
          ASSERT_EQ(otherBefore + 1, other->stats().tensorCoreProducts) << tile;
          EXPECT_EQ(0, std::memcmp(same.data(), want.data(), want.size() * 4)) << tile;
        }
        for (int64_t t : {int64_t(0), int64_t(9), tokens - 1}) {
          const auto alone = product(*gpu, t, 1);
          EXPECT_EQ(0, std::memcmp(alone.data(), mma.data() + t * kRows, size_t(kRows) * 4)) << "token " << t;
        }
      }
    }
}

// The prompt path (Device::setPromptRows, gemm_f16.cuh): the rows it names come from fp16 tensor
// cores, within fp16's rounding of the weights and activations of the float64 product over the
// dequantized weights (2^-10 of sum |w x|: 2^-11 for each rounding, the fp32 sums well inside the
// rest); every other row keeps the decode kernels' bits. Each weight type dequant_f16 decodes, rows
// that end mid-block (300 of a 128-row tile), tokens that end mid-tile, two prompt ranges around
// decode rows, a bias, 2-byte aligned q6_K rows.
TEST_F(CudaOps, PromptRowsComeFromFp16TensorCoresWithinFp16RoundingAndOtherRowsKeepTheirBits) {
  if (gpu->computeCapability() < 80) GTEST_SKIP() << gpu->info().name << ": fp16 mma.m16n8k16 needs sm_80 or later";
  constexpr int64_t kRows = 300, kTokens = 150;
  const std::vector<Device::RowRange> prompt = {{0, 5}, {20, 150}};
  for (const auto& [type, cols, pad] : {std::tuple{TensorType::kQ4_K, int64_t(2048), size_t(16)},
                                        {TensorType::kQ6_K, int64_t(3072), size_t(2)},
                                        {TensorType::kQ8_0, int64_t(1024), size_t(2)},
                                        {TensorType::kQ4_0, int64_t(512), size_t(2)},
                                        {TensorType::kQ5_K, int64_t(512), size_t(16)},
                                        {TensorType::kF16, int64_t(256), size_t(0)}}) {
    SCOPED_TRACE(std::string(quant::typeName(type)) + ", " + std::to_string(cols) + " columns");
    const Matrix m = randomMatrix(type, kRows, cols, freshSeed() + uint32_t(cols) + 11 * uint32_t(type), pad);
    const auto xHost = randomFloats(size_t(kTokens * cols), freshSeed() + 5, 2.0f);
    const auto biasHost = randomFloats(size_t(kRows), freshSeed() + 6);
    auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    auto x = upload(*gpu, xHost);
    auto bias = upload(*gpu, biasHost);
    auto y = gpu->allocate(size_t(kTokens * kRows) * 4);
    const WeightRef ref{type, w->data(), kRows, cols, m.stride};
    const auto product = [&](std::span<const Device::RowRange> rows) {
      gpu->setPromptRows(rows, kTokens);
      gpu->matmul(ref, x.as<float>(), kTokens, reinterpret_cast<float*>(y->data()), bias.as<float>());
      gpu->setPromptRows({}, 0);
      return download<float>(*gpu, *y, size_t(kTokens * kRows));
    };
    const uint64_t before = gpu->stats().promptProducts;
    const auto got = product(prompt);
    ASSERT_EQ(before + prompt.size(), gpu->stats().promptProducts) << "gemm_f16 did not run";
    const auto decode = product({});
    ASSERT_EQ(before + prompt.size(), gpu->stats().promptProducts);
    size_t differing = 0;
    for (int64_t t = 0; t < kTokens; t++) {
      const bool isPrompt = (t < 5) || (t >= 20);
      const float* g = got.data() + t * kRows;
      const float* d = decode.data() + t * kRows;
      if (!isPrompt) {
        ASSERT_EQ(0, std::memcmp(g, d, size_t(kRows) * 4)) << "decode row " << t;
        continue;
      }
      differing += std::memcmp(g, d, size_t(kRows) * 4) != 0;
      const float* xt = xHost.data() + t * cols;
      for (int64_t r = 0; r < kRows; r++) {
        double sum = 0, magnitude = 0;
        for (int64_t k = 0; k < cols; k++) {
          const double p = double(m.dequantized[size_t(r * cols + k)]) * double(xt[k]);
          sum += p;
          magnitude += std::fabs(p);
        }
        sum += double(biasHost[size_t(r)]);
        ASSERT_LE(std::fabs(double(g[r]) - sum), std::ldexp(magnitude, -10) + 1e-6) << "token " << t << ", row " << r;
      }
    }
    // fp16 products are not the decode kernels' (integer or float) sums: the path did change.
    EXPECT_GT(differing, 100u);
  }
}

// A prompt token's outputs depend on its own row only: the same bits computed among 300 prompt
// tokens (blocks of 128 weight rows over three token tiles) as in a product of 37 (too few blocks
// for 128 rows: blocks of 32) or of one, run after run, and at every block height and K per stage.
TEST_F(CudaOps, PromptRowsGiveTheSameBitsInAnyBatchAndAnyTile) {
  if (gpu->computeCapability() < 80) GTEST_SKIP() << gpu->info().name << ": fp16 mma.m16n8k16 needs sm_80 or later";
  constexpr int64_t kRows = 8192, kCols = 2048, kTokens = 300;
  const Matrix m = randomMatrix(TensorType::kQ4_K, kRows, kCols, freshSeed() + 3, 16);
  const auto xHost = randomFloats(size_t(kTokens * kCols), freshSeed() + 4, 2.0f);
  const auto product = [&](cuda::CudaDevice& dev, int64_t first, int64_t n) {
    auto w = dev.adoptHostBytes(m.bytes.data(), m.bytes.size());
    auto x = upload(dev, xHost);
    auto y = dev.allocate(size_t(n * kRows) * 4);
    const Device::RowRange all{0, n};
    dev.setPromptRows({&all, 1}, n);
    dev.matmul(WeightRef{TensorType::kQ4_K, w->data(), kRows, kCols, m.stride}, x.as<float>() + first * kCols, n,
               reinterpret_cast<float*>(y->data()), nullptr);
    dev.setPromptRows({}, 0);
    return download<float>(dev, *y, size_t(n * kRows));
  };
  const uint64_t before = gpu->stats().promptProducts;
  const auto whole = product(*gpu, 0, kTokens);
  EXPECT_EQ(0, std::memcmp(whole.data(), product(*gpu, 0, kTokens).data(), whole.size() * 4)) << "a second run differs";
  const auto some = product(*gpu, 100, 37);
  EXPECT_EQ(0, std::memcmp(some.data(), whole.data() + 100 * kRows, some.size() * 4));
  for (int64_t t : {int64_t(0), int64_t(131), kTokens - 1}) {
    const auto alone = product(*gpu, t, 1);
    EXPECT_EQ(0, std::memcmp(alone.data(), whole.data() + t * kRows, size_t(kRows) * 4)) << "token " << t;
  }
  EXPECT_EQ(before + 6, gpu->stats().promptProducts);
  for (const int rows : {32, 64, 128}) {
    for (const int slice : {32, 64}) {
      cuda::CudaDeviceOptions o;
      o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
      o.settings.promptBlockRows = rows;
      o.settings.promptSliceK = slice;
      auto other = cuda::CudaDevice::create(o);
      EXPECT_EQ(0, std::memcmp(whole.data(), product(*other, 0, kTokens).data(), whole.size() * 4))
          << rows << " rows a block, " << slice << " columns a stage";
      EXPECT_EQ(1u, other->stats().promptProducts);
    }
  }
}

// q, k and v read one input and the integer kernels quantize it once; anything that may write
// that input in between - an op, a copy, the product's own output - must make the next product
// quantize it again. No synchronisation between the steps, as in a real step's queue.
TEST_F(CudaOps, AnInputWrittenBetweenIntegerProductsIsQuantizedAgain) {
  constexpr int64_t kRows = 64, kCols = 512;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(quant::typeName(type)));
    ASSERT_TRUE(cuda::cudaIntegerMatmulType(type, kCols));
    const Matrix m = randomMatrix(type, kRows, kCols, freshSeed() + 11 * uint32_t(type));
    auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
    const WeightRef gw{type, w->data(), kRows, kCols, m.stride};
    const Matrix sq = randomMatrix(type, kCols, kCols, freshSeed() + 5);
    auto ws = gpu->adoptHostBytes(sq.bytes.data(), sq.bytes.size());
    expectWrittenInputsQuantizedAgain(*gpu, gw, WeightRef{type, ws->data(), kCols, kCols, sq.stride}, freshSeed());
  }
}

// The same for the prompt path, which rounds an input to fp16 once for the products that read it
// (every one-token product here a prompt row).
TEST_F(CudaOps, AnInputWrittenBetweenPromptProductsIsRoundedAgain) {
  if (gpu->computeCapability() < 80) GTEST_SKIP() << gpu->info().name << ": fp16 mma.m16n8k16 needs sm_80 or later";
  constexpr int64_t kRows = 64, kCols = 512;
  const Matrix m = randomMatrix(TensorType::kQ4_K, kRows, kCols, freshSeed() + 13);
  auto w = gpu->adoptHostBytes(m.bytes.data(), m.bytes.size());
  const Matrix sq = randomMatrix(TensorType::kQ4_K, kCols, kCols, freshSeed() + 5);
  auto ws = gpu->adoptHostBytes(sq.bytes.data(), sq.bytes.size());
  const Device::RowRange one{0, 1};
  gpu->setPromptRows({&one, 1}, 1);
  const uint64_t before = gpu->stats().promptProducts;
  expectWrittenInputsQuantizedAgain(*gpu, WeightRef{TensorType::kQ4_K, w->data(), kRows, kCols, m.stride},
                                    WeightRef{TensorType::kQ4_K, ws->data(), kCols, kCols, sq.stride}, freshSeed());
  gpu->setPromptRows({}, 0);
  EXPECT_GE(gpu->stats().promptProducts, before + 10) << "the products did not take the prompt path";
}

// rms_norm (also fused with the residual add before it), swiglu and geglu write the integer form of
// their output themselves when an integer product reads it next; the product's result is bit for
// bit what quantize_x's form gives.
TEST_F(CudaOps, ProducersFusedWithTheQuantizationGiveTheSameBitsAsQuantizingAfter) {
  ProducerCheck<cuda::CudaDevice> p(*gpu, freshSeed());
  constexpr int64_t kTokens = p.kTokens, kCols = p.kCols;
  auto u = upload(*gpu, randomFloats(size_t(kTokens * kCols), freshSeed() + 23));
  auto& x = p.x;
  auto& norm = p.norm;
  float* o = p.o();
  // The first integer product of a shape grows the device's scratch, which runs the queue (no
  // fusion then): a real step's first product is a prefill's.
  gpu->matmul(p.gw, x.as<float>(), kTokens, p.ys(), nullptr);
  for (const std::string producer : {"add + rmsNorm", "swiglu", "geglu"}) {
    SCOPED_TRACE(producer);
    if (producer == "swiglu") {
      gpu->swiglu(x.as<float>(), u.as<float>(), o, kTokens * kCols);
    } else if (producer == "geglu") {
      gpu->geglu(x.as<float>(), u.as<float>(), o, kTokens * kCols);
    } else {
      // The residual add and the norm after it run as one kernel: x is updated all the same, and
      // the norm is of the sum.
      const auto x0 = download<float>(*gpu, *x.buffer, size_t(kTokens * kCols));
      const auto u0 = download<float>(*gpu, *u.buffer, size_t(kTokens * kCols));
      const uint64_t adds = gpu->stats().fusedAdds;
      gpu->add(x.as<float>(), u.as<float>(), kTokens * kCols);
      gpu->rmsNorm(x.as<float>(), norm.as<float>(), o, kTokens, kCols, 1e-5f);
      EXPECT_EQ(adds + 1, gpu->stats().fusedAdds);
      {
        std::vector<float> sum(x0.size());
        for (size_t i = 0; i < sum.size(); i++) sum[i] = x0[i] + u0[i];
        auto unfused = upload(*gpu, sum);
        auto normed = gpu->allocate(sum.size() * 4);
        gpu->rmsNorm(unfused.as<float>(), norm.as<float>(), reinterpret_cast<float*>(normed->data()), kTokens, kCols,
                     1e-5f);
        const auto wantNorm = download<float>(*gpu, *normed, sum.size());
        EXPECT_EQ(0, std::memcmp(download<float>(*gpu, *x.buffer, sum.size()).data(), sum.data(), sum.size() * 4));
        EXPECT_EQ(0, std::memcmp(download<float>(*gpu, *p.out, sum.size()).data(), wantNorm.data(), sum.size() * 4));
      }  // (freeing a buffer runs the queue: before the fusions below, not between them)
      // Again, now with the product after it.
      gpu->add(x.as<float>(), u.as<float>(), kTokens * kCols);
      gpu->rmsNorm(x.as<float>(), norm.as<float>(), o, kTokens, kCols, 1e-5f);
      EXPECT_EQ(adds + 2, gpu->stats().fusedAdds);
    }
    p.expectProductsReadTheProducersForm(gpu->stats().fusedQuantizations, gpu->stats().separateQuantizations);
  }
}

// GEGLU (elementwise.cuh's geglu) against float64, out of place and in place: a length that leaves
// the last block part-filled, and one shorter than a block.
TEST_F(CudaOps, GegluMatchesAFloat64ReferenceInPlaceAndOut) {
  expectGegluMatchesFloat64(*gpu, 100003, freshSeed());
  expectGegluMatchesFloat64(*gpu, 37, freshSeed() + 7);
}

// A sliding window (attention.cuh's contextStart) reads only its positions - pages before it are
// null, positions before it on its first page NaN - and gives the bits of a context holding just
// those positions: decode through attention_spans (the default device), attention_split (spans
// off), the one-block kernel (no split) and blocks per KV head rather than per query head; prefill
// batches through the one-block kernel (a slid window) and attention_rows (a window not yet slid);
// fp32 pages (by cp.async, and by plain loads) and fp16; both tile sizes (head dims 64 and 128).
TEST_F(CudaOps, SlidingWindowAttentionReadsOnlyItsPositionsWithTheBitsOfAContextOfThem) {
  struct Variant {
    const char* name;
    std::function<void(cuda::CudaSettings&)> set;
  };
  const Variant variants[] = {
      {"default", [](cuda::CudaSettings&) {}},
      {"attention_split", [](cuda::CudaSettings& s) { s.attentionSpan = 0; }},
      {"no split", [](cuda::CudaSettings& s) { s.attentionSplit = 0; }},
      {"a block per KV head", [](cuda::CudaSettings& s) { s.attentionPerHead = false; }},
      {"plain loads", [](cuda::CudaSettings& s) { s.defines.emplace_back("JL_ATTN_PREFETCH", 0); }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    cuda::CudaDeviceOptions o;
    o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
    v.set(o.settings);
    auto dev = cuda::CudaDevice::create(o);
    for (int headDim : {64, 128}) {
      for (KvPrecision precision : {KvPrecision::kF32, KvPrecision::kF16}) {
        SCOPED_TRACE(std::string(precision == KvPrecision::kF16 ? "fp16" : "fp32") + " pages, head dim " +
                     std::to_string(headDim));
        expectSlidingWindowsAttendOnlyTheirPositions(*dev, *cpu, precision, freshSeed() + 60, headDim);
      }
    }
  }
}

// A migration's pages between two CUDA devices: gathered on the source, one peer copy, scattered
// on the target - the second GPU when there is one, else a second device on this GPU (the same
// kernels and copy, within one context). Anything else (the CPU as target) is left to the host
// path: moveBlocksTo says false and touches nothing.
TEST_F(CudaOps, BlocksMoveBetweenCudaDevicesInOneGatherPeerCopyAndScatter) {
  auto other = makeCudaDevice(cuda::CudaDevice::count() > 1 ? 1 : 0);
  std::printf("target: %s (%s)\n", other->info().id.str().c_str(), other->info().name.c_str());
  for (size_t blockBytes : {size_t(1) << 20, size_t(4099)}) {
    SCOPED_TRACE(blockBytes);
    constexpr size_t kPool = 24, kCount = 20;
    std::mt19937 rng(freshSeed() + uint32_t(blockBytes));
    const auto randomBytes = [&](size_t n) {
      std::vector<uint8_t> v(n);
      for (auto& b : v) b = uint8_t(rng());
      return v;
    };
    const auto sourceHost = randomBytes(kPool * blockBytes), targetHost = randomBytes(kPool * blockBytes);
    auto source = gpu->adoptHostBytes(sourceHost.data(), sourceHost.size());
    auto target = other->adoptHostBytes(targetHost.data(), targetHost.size());
    std::vector<size_t> order(kPool);
    std::iota(order.begin(), order.end(), size_t(0));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<const uint8_t*> from;
    std::vector<uint8_t*> to;
    std::vector<uint8_t> want = targetHost;
    for (size_t i = 0; i < kCount; i++) {
      from.push_back(source->data() + order[i] * blockBytes);
      to.push_back(target->data() + order[kPool - 1 - i] * blockBytes);
      std::memcpy(want.data() + order[kPool - 1 - i] * blockBytes, sourceHost.data() + order[i] * blockBytes,
                  blockBytes);
    }
    const uint64_t before = gpu->stats().peerBlockMoves;
    ASSERT_TRUE(gpu->moveBlocksTo(*other, from.data(), to.data(), kCount, blockBytes));
    EXPECT_EQ(before + 1, gpu->stats().peerBlockMoves);
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*other, *target, want.size()).data(), want.data(), want.size()));
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*gpu, *source, sourceHost.size()).data(), sourceHost.data(),
                             sourceHost.size()))
        << "the source is only read";
    // Blocks that are not the target's are refused before anything moves.
    std::vector<uint8_t*> foreign = {to[0], source->data()};
    EXPECT_THROW(gpu->moveBlocksTo(*other, from.data(), foreign.data(), 2, blockBytes), Error);
    EXPECT_EQ(0, std::memcmp(download<uint8_t>(*other, *target, want.size()).data(), want.data(), want.size()));
  }
  // Whole buffers device to device too (copyToDevice), and the CPU is not a peer.
  const auto bytes = randomFloats(1000, freshSeed() + 3);
  auto a = upload(*gpu, bytes);
  auto b = other->allocate(bytes.size() * 4);
  gpu->copyToDevice(*other, b->data(), a.buffer->data(), bytes.size() * 4);
  EXPECT_EQ(bytes, download<float>(*other, *b, bytes.size()));
  const uint8_t* one[] = {a.buffer->data()};
  uint8_t* hostBlock[] = {reinterpret_cast<uint8_t*>(const_cast<float*>(bytes.data()))};
  EXPECT_FALSE(gpu->moveBlocksTo(*cpu, one, hostBlock, 1, 64));
  // Within one device: blocks 0 and 1 of a buffer onto 3 and 2.
  const uint8_t* within[] = {a.buffer->data(), a.buffer->data() + 256};
  uint8_t* onto[] = {a.buffer->data() + 3 * 256, a.buffer->data() + 2 * 256};
  ASSERT_TRUE(gpu->moveBlocksTo(*gpu, within, onto, 2, 256));
  const auto moved = download<uint8_t>(*gpu, *a.buffer, 4 * 256);
  const auto* original = reinterpret_cast<const uint8_t*>(bytes.data());
  EXPECT_EQ(0, std::memcmp(moved.data() + 3 * 256, original, 256));
  EXPECT_EQ(0, std::memcmp(moved.data() + 2 * 256, original + 256, 256));
  EXPECT_EQ(0, std::memcmp(moved.data(), original, 2 * 256));
}

// Decode-sized products of one input (a layer's q, k and v) go out as one launch; larger batches
// as separate ones (the conformance suite checks the bits either way).
TEST_F(CudaOps, DecodeProductsOfOneInputAreOneLaunch) {
  const Matrix mq = randomMatrix(TensorType::kQ4_K, 96, 512, freshSeed() + 61);
  const Matrix mv = randomMatrix(TensorType::kQ6_K, 40, 512, freshSeed() + 62);
  auto wq = gpu->adoptHostBytes(mq.bytes.data(), mq.bytes.size());
  auto wv = gpu->adoptHostBytes(mv.bytes.data(), mv.bytes.size());
  const WeightRef q{mq.type, wq->data(), mq.rows, mq.cols, mq.stride};
  const WeightRef v{mv.type, wv->data(), mv.rows, mv.cols, mv.stride};
  for (int64_t tokens : {1, 8, 12, 16, 17, 40}) {
    auto x = upload(*gpu, randomFloats(size_t(tokens * 512), freshSeed() + 63));
    auto yq = gpu->allocate(size_t(tokens * 96) * 4), yv = gpu->allocate(size_t(tokens * 40) * 4);
    const MatmulTarget targets[] = {{q, reinterpret_cast<float*>(yq->data()), nullptr},
                                    {v, reinterpret_cast<float*>(yv->data()), nullptr}};
    const uint64_t before = gpu->stats().groupedProducts;
    gpu->matmuls(targets, x.as<float>(), tokens);
    EXPECT_EQ(gpu->stats().groupedProducts, before + (tokens <= 16 ? 1 : 0)) << tokens << " tokens";
  }
}

}  // namespace
}  // namespace jitllm::testing
