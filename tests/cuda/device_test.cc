// The CUDA device itself: discovery through device specs, the kernel cache across devices, and
// matrix products in real model shapes (long rows, many tokens) against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "engine/devices/builtin_backends.h"
#include "engine/runtime/model.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/gpu/long_context.h"
#include "tests/gpu/serving_shapes.h"
#include "tools/random_model.h"

namespace jitllm::testing {
namespace {

using quant::TensorType;

TEST(CudaDevices, DeviceSpecCreatesCudaDevicesAndRejectsMissingOnes) {
  JITLLM_REQUIRE_CUDA();
  auto devices = runtime::createDevices("cpu:0,cuda:0", {});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1]->info().id.str(), "cuda:0");
  EXPECT_FALSE(devices[1]->info().caps.hostMemory);
  std::printf("cuda:0: %s, budget %.1f GiB\n", devices[1]->info().name.c_str(),
              double(devices[1]->info().memoryBudget) / double(1 << 30));
  const int n = cuda::CudaDevice::count();
  EXPECT_THROW(runtime::createDevices("cuda:" + std::to_string(n), {}), Error);
}

TEST(CudaDevices, KernelsCompiledOnceAreLoadedFromTheDiskCacheByTheNextDevice) {
  JITLLM_REQUIRE_CUDA();
  const std::string root =
      (std::filesystem::temp_directory_path() / ("jitllm-cuda-dc-" + std::to_string(getpid()))).string();
  auto run = [&] {
    cuda::CudaDeviceOptions o;
    o.cacheRoot = root;
    auto gpu = cuda::CudaDevice::create(o);
    auto x = upload(*gpu, randomFloats(1000, 1));
    const auto start = std::chrono::steady_clock::now();
    gpu->add(x.as<float>(), x.as<float>(), 1000);
    gpu->synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double cold = run();
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(root + "/cuda")) files++;
  EXPECT_EQ(files, 1u);
  const double warm = run();
  std::printf("first use of the elementwise module: %.3f s compiling, %.3f s from the cache\n", cold, warm);
  EXPECT_LT(warm, cold);
  std::filesystem::remove_all(root);
}

// After Model::prepareKernels, serving makes no kernel: decode batches of every size from 1 to 64
// sessions, prefills of one session and of several beside decodes, long and short contexts, and
// the candidates of greedy and sampled rows - all run on modules made ahead, on a cold cache in
// parallel (the tiny Q4_K_M shape: integer, tensor-core and grouped products).
TEST(CudaDevices, AfterPrepareKernelsNoStepShapeMakesAModule) {
  JITLLM_REQUIRE_CUDA();
  const std::string path = writeTinyQ4KM("prepare");
  if (path.empty()) GTEST_SKIP() << "no vocab file for the tiny shape in " << JITLLM_SHARED_DIR;
  const std::string root =
      (std::filesystem::temp_directory_path() / ("jitllm-cuda-prep-" + std::to_string(getpid()))).string();
  cuda::CudaDeviceOptions o;
  o.cacheRoot = root;  // cold: every module is compiled here
  auto gpu = cuda::CudaDevice::create(o);
  runtime::ModelLoadOptions lo;
  lo.devices = {gpu.get()};
  auto model = runtime::Model::load(path, lo);
  const size_t made = model->prepareKernels();
  const auto prepared = gpu->stats();
  std::printf("prepareKernels: %zu modules (%llu compiled) in %.2f s\n", made,
              (unsigned long long)prepared.modulesCompiled, prepared.prepareSeconds);
  EXPECT_GT(made, 8u);
  runServingShapes(*model, {1, 2, 3, 5, 8, 9, 16, 17, 31, 33, 48, 64}, 300, 3, 1024);
  // A prefill alone, of every chunk length a step can give.
  for (size_t len : {size_t(15), size_t(16), size_t(100), size_t(512), size_t(700)}) {
    runServingShapes(*model, {1}, len, 0, 1024);
  }
  EXPECT_EQ(gpu->stats().modulesMadeOnUse, 0u) << "a step shape prepareKernels did not foresee";
  // A second device on the now warm disk cache compiles nothing.
  model.reset();
  gpu.reset();
  auto again = cuda::CudaDevice::create(o);
  lo.devices = {again.get()};
  model = runtime::Model::load(path, lo);
  model->prepareKernels();
  EXPECT_EQ(again->stats().modulesCompiled, 0u);
  std::printf("warm cache: prepareKernels in %.2f s\n", again->stats().prepareSeconds);
  model.reset();
  again.reset();
  std::filesystem::remove(path);
  std::filesystem::remove_all(root);
}

// Decode steps repeat the same queue of ops, which runs as a captured CUDA graph from the second
// repetition on: every logit must be bitwise what op-by-op submission gives, also when a second
// session joins mid-way (another queue, another graph) and leaves again (the first graph again).
// Both ways a step can end: its logits read back, or its candidates selected on the GPU (the
// serving step: greedy and top-40 rows) - once, the candidates' read-back left the staging ring
// where it was, so no serving step ever matched a graph.
TEST(CudaDevices, RepeatedDecodeStepsRunAsGraphsWithBitwiseTheSameLogits) {
  JITLLM_REQUIRE_CUDA();
  const std::string path = std::string(JITLLM_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  constexpr int64_t kStride = 40;
  const std::vector<CandidateRequest> requests = {{1, 1.0f, {}}, {kStride, 1.1f, {}}};
  auto run = [&](bool graphs, bool candidates, uint64_t* launches) {
    cuda::CudaDeviceOptions o;
    o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
    o.settings.graphs = graphs;
    auto gpu = cuda::CudaDevice::create(o);
    runtime::ModelLoadOptions lo;
    lo.devices = {gpu.get()};
    auto model = runtime::Model::load(path, lo);
    const int64_t V = model->config().vocabSize;
    std::vector<std::unique_ptr<runtime::Session>> sessions;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<float> all;
    for (int step = 0; step < 60; step++) {
      if (step == 0 || step == 20) {  // a session starts with a prompt
        sessions.push_back(model->createSession(256));
        tokens.push_back({1, 403, 407, 261, 378, 432, 383});
      }
      if (step == 40) {  // ... and one ends
        sessions.pop_back();
        tokens.pop_back();
      }
      std::vector<runtime::SequenceInput> in;
      for (size_t i = 0; i < sessions.size(); i++) {
        const size_t fed = size_t(sessions[i]->length());
        in.push_back({sessions[i].get(), {tokens[i].data() + fed, tokens[i].size() - fed}, false});
      }
      if (candidates) {
        std::vector<int32_t> ids;
        std::vector<float> values;
        model->forward(in, std::span(requests).first(sessions.size()), kStride, ids, values);
        for (size_t i = 0; i < sessions.size(); i++) {
          tokens[i].push_back(ids[i * kStride]);
          all.insert(all.end(), values.begin() + int64_t(i * kStride),
                     values.begin() + int64_t(i * kStride) + requests[i].count);
          for (int64_t k = 0; k < requests[i].count; k++) all.push_back(float(ids[i * kStride + size_t(k)]));
        }
        continue;
      }
      std::vector<float> logits;
      model->forward(in, logits);
      for (size_t i = 0; i < sessions.size(); i++) {
        const float* row = logits.data() + int64_t(i) * V;
        tokens[i].push_back(int32_t(std::max_element(row, row + V) - row));
      }
      all.insert(all.end(), logits.begin(), logits.end());
    }
    *launches = gpu->stats().graphLaunches;
    return all;
  };
  for (const bool candidates : {false, true}) {
    SCOPED_TRACE(candidates ? "candidates selected on the GPU" : "logits read back");
    uint64_t withGraphs = 0, without = 0;
    const auto a = run(true, candidates, &withGraphs);
    const auto b = run(false, candidates, &without);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    EXPECT_EQ(without, 0u);
    EXPECT_GE(withGraphs, 45u) << "all but the first two steps of each batch shape";
    std::printf("60 decode steps (%s): %llu ran as graphs\n", candidates ? "candidates" : "logits",
                static_cast<unsigned long long>(withGraphs));
  }
}

// The launch-saving paths - programmatic dependent launch, graphs, fused and grouped launches,
// decode steps submitted in parts (docs/cuda.md), the split attention of a context past one chunk - against plain
// launches one op at a time, on a Q4_K_M model (integer products, q6_K among them): every logit of a prefill and 40
// decode steps bitwise the same.
TEST(CudaDevices, EveryLaunchSavingPathGivesTheBitsOfPlainLaunches) {
  JITLLM_REQUIRE_CUDA();
  const auto shape = tools::findShape("tiny");
  ASSERT_TRUE(shape);
  const std::string vocab = std::string(JITLLM_SHARED_DIR) + "/" + shape->vocabFile;
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << "no " << vocab;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("jitllm-cuda-paths-" + std::to_string(getpid()) + ".gguf")).string();
  tools::writeRandomModel({*shape, *tools::findMix("q4_k_m"), 5, JITLLM_SHARED_DIR}, path);
  const auto run = [&](bool fast) {
    cuda::CudaDeviceOptions o;
    o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
    o.settings.graphs = o.settings.fuse = o.settings.programmaticLaunch = o.settings.earlySubmit = fast;
    auto gpu = cuda::CudaDevice::create(o);
    runtime::ModelLoadOptions lo;
    lo.devices = {gpu.get()};
    auto model = runtime::Model::load(path, lo);
    auto session = model->createSession(512);
    std::vector<int32_t> tokens(90);  // past one 64-position attention chunk
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t((i * 7919 + 1) % 200);
    std::vector<float> all, logits;
    const int64_t V = model->config().vocabSize;
    model->forward(std::vector<runtime::SequenceInput>{{session.get(), tokens, false}}, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    for (int step = 0; step < 40; step++) {
      const int32_t next = int32_t(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V));
      model->forward(std::vector<runtime::SequenceInput>{{session.get(), {&next, 1}, false}}, logits);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    if (fast) {
      EXPECT_GT(gpu->stats().groupedProducts, 0u);
      EXPECT_GT(gpu->stats().graphLaunches, 0u);
      EXPECT_GT(gpu->stats().earlySubmits, 0u) << "decode steps were not submitted in parts";
    } else {
      EXPECT_EQ(gpu->stats().groupedProducts, 0u);
      EXPECT_EQ(gpu->stats().earlySubmits, 0u);
    }
    return all;
  };
  const auto fast = run(true);
  const auto plain = run(false);
  std::filesystem::remove(path);
  ASSERT_EQ(fast.size(), plain.size());
  EXPECT_EQ(0, std::memcmp(fast.data(), plain.data(), fast.size() * sizeof(float)));
}

// Rows of a real model's length, prefill-sized batches: the CPU's values within float32
// rounding, and each token's bits the same alone as in the batch.
TEST(CudaDevices, MatmulInModelShapesMatchesTheCpuAndIsBatchInvariant) {
  JITLLM_REQUIRE_CUDA();
  auto cpu = makeCpuDevice();
  // q4_K and q6_K twice: on the integer kernels (the default) and on the float ones.
  for (bool integer : {true, false}) {
    cuda::CudaDeviceOptions options;
    options.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
    options.settings.integerMatmul = integer;
    auto gpu = cuda::CudaDevice::create(options);
    for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ8_0, TensorType::kF16}) {
      if (!integer && !cuda::cudaIntegerMatmulType(type, 2048)) continue;
      for (int64_t cols : {2048, 3072, 8192}) {
        const int64_t rows = 300, tokens = 37;
        SCOPED_TRACE(std::string(quant::typeName(type)) + " x " + std::to_string(cols) +
                     (integer ? ", integer kernels" : ", float kernels"));
        const size_t stride = *quant::rowBytes(type, cols);
        std::vector<uint8_t> bytes(stride * size_t(rows));
        for (int64_t r = 0; r < rows; r++) {
          const auto row = randomFloats(size_t(cols), uint32_t(r * 3 + cols), 0.05f);
          quant::quantizeRow(type, row.data(), bytes.data() + size_t(r) * stride, cols);
        }
        auto w = gpu->adoptHostBytes(bytes.data(), bytes.size());
        const auto xHost = randomFloats(size_t(tokens * cols), uint32_t(cols + 7));
        auto x = upload(*gpu, xHost);
        auto y = gpu->allocate(size_t(tokens * rows) * 4);
        gpu->matmul({type, w->data(), rows, cols, stride}, x.as<float>(), tokens, reinterpret_cast<float*>(y->data()),
                    nullptr);
        const auto got = download<float>(*gpu, *y, size_t(tokens * rows));
        std::vector<float> want(got.size());
        cpu->matmul({type, bytes.data(), rows, cols, stride}, xHost.data(), tokens, want.data(), nullptr);
        // Float kernels: float32 rounding. Integer kernels: ~15-bit activations (quantize_x.cuh),
        // about 1e-10 on random data; a wrong quant, scale or offset is >1e-3.
        const bool usesIntegers = integer && cuda::cudaIntegerMatmulType(type, cols);
        const double error = nmse(got, want);
        EXPECT_LT(error, usesIntegers ? 1e-8 : 1e-12);
        if (usesIntegers) {
          EXPECT_GT(error, 0.0) << "the integer kernels did not run";
        }
        for (int64_t t : {int64_t(0), int64_t(5), tokens - 1}) {
          gpu->matmul({type, w->data(), rows, cols, stride}, x.as<float>() + t * cols, 1,
                      reinterpret_cast<float*>(y->data()), nullptr);
          const auto alone = download<float>(*gpu, *y, size_t(rows));
          EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + t * rows, size_t(rows) * 4)) << "token " << t;
        }
      }
    }
  }
}

// A long context: attention over many tiles and pages, decode and prefill alike.
TEST(CudaDevices, AttentionOverAThousandPositionsMatchesTheCpu) {
  JITLLM_REQUIRE_CUDA();
  auto gpu = makeCudaDevice();
  auto cpu = makeCpuDevice();
  for (int headDim : {64, 128}) {
    SCOPED_TRACE(headDim);
    const int heads = 32;
    LongContext ctx(*gpu, *cpu, KvLayout{16, 8, headDim, KvPrecision::kF32}, 1100, 5);
    // Five tokens use 40 blocks, so each token's 64-position chunks run in blocks of their own
    // and are folded by the block that finishes last (attention_split); the same queries four times
    // over (160 blocks) take one block per token and KV head, folding as they go: same bits.
    // Few tokens also take a block per query head rather than per KV head (4 query heads share
    // each KV head here): the same bits again.
    std::vector<int32_t> positions = {ctx.length() - 1, 0, 63, 64, 500};
    const auto q = randomFloats(positions.size() * heads * size_t(headDim), 7, 0.3f);
    const float scale = float(1.0 / std::sqrt(double(headDim)));
    // The twenty tokens of the copies (one session's page table) take blocks of several tokens
    // (attention_rows), each row its own context: the same bits once more.
    const uint64_t perHead = gpu->stats().perHeadAttentions, rowBlocks = gpu->stats().rowAttentions;
    ctx.expectChunkedAndWholeAgree(q, positions, heads, scale, 4);
    EXPECT_EQ(perHead + 1, gpu->stats().perHeadAttentions)
        << "the five tokens' blocks did not serve one query head each";
    EXPECT_EQ(rowBlocks + 1, gpu->stats().rowAttentions) << "the twenty tokens did not take blocks of several tokens";
    {
      // A short context (no chunk split): three tokens a block per query head, sixty tokens
      // (480 blocks per KV head, more than any GPU's SMs) a block per KV head.
      SCOPED_TRACE("short context");
      const std::vector<int32_t> shortPositions = {0, 10, 63};
      const auto shortQ = randomFloats(shortPositions.size() * heads * size_t(headDim), 8, 0.3f);
      const uint64_t before = gpu->stats().perHeadAttentions;
      ctx.expectChunkedAndWholeAgree(shortQ, shortPositions, heads, scale, 20);
      EXPECT_EQ(before + 1, gpu->stats().perHeadAttentions);
    }
    std::vector<int32_t> many;
    std::vector<float> manyQ;
    for (int r = 0; r < 4; r++) {
      many.insert(many.end(), positions.begin(), positions.end());
      manyQ.insert(manyQ.end(), q.begin(), q.end());
    }
    auto gManyQ = upload(*gpu, manyQ);
    auto manyOut = gpu->allocate(manyQ.size() * 4);

    // The output projection after attention: attention (either kernel) writes the integer form
    // of its output itself, with the bits quantize_x gives.
    const int64_t cols = int64_t(heads) * headDim, rows = 64;
    const size_t stride = *quant::rowBytes(TensorType::kQ4_K, cols);
    std::vector<uint8_t> wBytes(stride * size_t(rows));
    for (int64_t r = 0; r < rows; r++) {
      const auto row = randomFloats(size_t(cols), uint32_t(r + 11), 0.05f);
      quant::quantizeRow(TensorType::kQ4_K, row.data(), wBytes.data() + size_t(r) * stride, cols);
    }
    auto w = gpu->adoptHostBytes(wBytes.data(), wBytes.size());
    const WeightRef wo{TensorType::kQ4_K, w->data(), rows, cols, stride};
    for (bool split : {true, false}) {
      SCOPED_TRACE(split ? "split attention" : "one block per token");
      const int64_t n = split ? int64_t(positions.size()) : int64_t(many.size());
      const std::vector<int32_t> at(many.begin(), many.begin() + n);  // `many` starts with `positions`
      auto y = gpu->allocate(size_t(n * rows) * 4);
      gpu->matmul(wo, reinterpret_cast<float*>(manyOut->data()), n, reinterpret_cast<float*>(y->data()), nullptr);
      const uint64_t fused = gpu->stats().fusedQuantizations;
      ctx.attendOnGpu(gManyQ.as<float>(), reinterpret_cast<float*>(manyOut->data()), at, heads, scale);
      gpu->matmul(wo, reinterpret_cast<float*>(manyOut->data()), n, reinterpret_cast<float*>(y->data()), nullptr);
      EXPECT_EQ(fused + 1, gpu->stats().fusedQuantizations);
      const auto got = download<float>(*gpu, *y, size_t(n * rows));
      auto copy = upload(*gpu, download<float>(*gpu, *manyOut, size_t(n * cols)));
      gpu->matmul(wo, copy.as<float>(), n, reinterpret_cast<float*>(y->data()), nullptr);
      EXPECT_EQ(0, std::memcmp(got.data(), download<float>(*gpu, *y, got.size()).data(), got.size() * 4));
    }
  }
}

// attention.cuh's JL_ATTN_PREFETCH (on by default): fp32 tiles by cp.async, each requested while
// the tile before it is computed. The same data in the same places, so the bits of plain loads
// (JL_ATTN_PREFETCH=0): decode (few tokens - a block per query head and span or chunk, folded
// after) and prefill-like batches (a block per token and KV head over all its tiles), at both head
// dims.
TEST(CudaDevices, AttentionWithTilesRequestedAheadGivesTheBitsOfPlainLoads) {
  JITLLM_REQUIRE_CUDA();
  auto ahead = makeCudaDevice();
  cuda::CudaDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.settings.defines = {{"JL_ATTN_PREFETCH", 0}};
  auto plain = cuda::CudaDevice::create(o);
  auto cpu = makeCpuDevice();
  for (int headDim : {64, 128}) {
    SCOPED_TRACE(headDim);
    const int heads = 32;
    const KvLayout kv{16, 8, headDim, KvPrecision::kF32};
    LongContext onPlain(*plain, *cpu, kv, 1100, 5), onAhead(*ahead, *cpu, kv, 1100, 5);
    const std::vector<int32_t> positions = {1099, 0, 63, 64, 500, 200};
    const auto q = randomFloats(positions.size() * heads * size_t(headDim), 9, 0.3f);
    const float scale = float(1.0 / std::sqrt(double(headDim)));
    for (int copies : {1, 20}) {
      SCOPED_TRACE(copies);
      std::vector<int32_t> at;
      std::vector<float> manyQ;
      for (int r = 0; r < copies; r++) {
        at.insert(at.end(), positions.begin(), positions.end());
        manyQ.insert(manyQ.end(), q.begin(), q.end());
      }
      const auto want = onPlain.attend(true, manyQ, at, heads, scale);
      const auto got = onAhead.attend(true, manyQ, at, heads, scale);
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
      EXPECT_LT(nmse(got, onAhead.attend(false, manyQ, at, heads, scale)), 1e-12);
    }
  }
}

// CudaDeviceOptions::attentionSpan (2 by default, or 4): chunks fold in spans, a decode block
// taking a whole span where that leaves enough blocks (attentionSpanBlocks). Decode - a block per
// span, or per chunk with the fold in spans - and the one-block kernel must agree bit for bit and
// with the CPU; a context of one span (span x 64 positions) or less keeps the one-level fold's bits.
TEST(CudaDevices, AttentionFoldedInSpansAgreesAcrossKernelsAndKeepsOneSpansBits) {
  JITLLM_REQUIRE_CUDA();
  cuda::CudaDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.settings.attentionSpan = 0;
  auto plain = cuda::CudaDevice::create(o);
  auto cpu = makeCpuDevice();
  for (const auto& [span, headDim] : {std::pair{2, 64}, std::pair{2, 128}, std::pair{4, 64}, std::pair{4, 128}}) {
    SCOPED_TRACE("span " + std::to_string(span) + ", head dim " + std::to_string(headDim));
    o.settings.attentionSpan = span;
    o.settings.attentionSpanBlocks = 0;  // a span a block wherever there is a whole span
    auto spans = cuda::CudaDevice::create(o);
    o.settings.attentionSpanBlocks = std::numeric_limits<int>::max();  // a chunk a block, always
    auto chunks = cuda::CudaDevice::create(o);
    const int heads = 32;
    const KvLayout kv{16, 8, headDim, KvPrecision::kF32};
    LongContext onPlain(*plain, *cpu, kv, 1100, 5), onSpans(*spans, *cpu, kv, 1100, 5),
        onChunks(*chunks, *cpu, kv, 1100, 5);
    const float scale = float(1.0 / std::sqrt(double(headDim)));
    uint32_t seed = 20;
    for (const std::vector<int32_t>& positions :
         {std::vector<int32_t>{1099, 0, 63, 64, 500, 200}, std::vector<int32_t>{500, 300, 255, 256, 0}}) {
      SCOPED_TRACE(positions[0]);
      const auto q = randomFloats(positions.size() * heads * size_t(headDim), seed++, 0.3f);
      onSpans.expectChunkedAndWholeAgree(q, positions, heads, scale, 20);
      onChunks.expectChunkedAndWholeAgree(q, positions, heads, scale, 20);
      const auto bySpan = onSpans.attend(true, q, positions, heads, scale);
      const auto byChunk = onChunks.attend(true, q, positions, heads, scale);
      ASSERT_EQ(bySpan.size(), byChunk.size());
      EXPECT_EQ(0, std::memcmp(bySpan.data(), byChunk.data(), bySpan.size() * sizeof(float)));
    }
    const int last = span * 64 - 1;
    const std::vector<int32_t> oneSpan = {last, 0, 63, 64, last / 2};
    const auto q = randomFloats(oneSpan.size() * heads * size_t(headDim), seed, 0.3f);
    const auto want = onPlain.attend(true, q, oneSpan, heads, scale);
    const auto got = onSpans.attend(true, q, oneSpan, heads, scale);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  }
}

// Prefill attention in blocks of several tokens of one session (attention_rows) against a block
// per token (attentionRowTokens = 0): bit for bit, at 3 tokens a block (a part-filled last block),
// the default 8 and 16; a prompt's consecutive positions across several chunks and spans, and
// tokens of very different contexts in one block; fp32 and fp16 pages, both head dims.
TEST(CudaDevices, PrefillAttentionInBlocksOfTokensGivesTheBitsOfABlockPerToken) {
  JITLLM_REQUIRE_CUDA();
  const auto device = [](int rowTokens) {
    cuda::CudaDeviceOptions o;
    o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
    o.settings.attentionRowTokens = rowTokens;
    return cuda::CudaDevice::create(o);
  };
  auto perToken = device(0);
  auto cpu = makeCpuDevice();
  for (int headDim : {64, 128}) {
    for (KvPrecision precision : {KvPrecision::kF32, KvPrecision::kF16}) {
      SCOPED_TRACE(::testing::Message() << "head dim " << headDim << (precision == KvPrecision::kF16 ? ", fp16" : ""));
      const int heads = 24;  // 3 query heads a KV head
      const KvLayout kv{16, 8, headDim, precision};
      LongContext reference(*perToken, *cpu, kv, 700, 21);
      std::vector<int32_t> positions;
      for (int p = 500; p < 700; p++) positions.push_back(p);  // a prompt's tail: chunks 7 .. 10
      for (int p : {0, 699, 63, 64, 65, 127, 128, 300, 1, 2}) positions.push_back(p);
      const auto q = randomFloats(positions.size() * heads * size_t(headDim), 22, 0.3f);
      const float scale = float(1.0 / std::sqrt(double(headDim)));
      const auto want = reference.attend(true, q, positions, heads, scale);
      EXPECT_LT(nmse(want, reference.attend(false, q, positions, heads, scale)), 1e-12);
      EXPECT_EQ(0u, perToken->stats().rowAttentions);
      for (int rowTokens : {3, 8, 16}) {
        SCOPED_TRACE(rowTokens);
        auto rows = device(rowTokens);
        LongContext ctx(*rows, *cpu, kv, 700, 21);
        const auto got = ctx.attend(true, q, positions, heads, scale);
        EXPECT_EQ(1u, rows->stats().rowAttentions) << "attention_rows did not run";
        ASSERT_EQ(want.size(), got.size());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
      }
    }
  }
}

// Kernel settings a device cannot honour are refused by name when it is made (before it holds
// streams or memory that a half-made device would leave behind).
TEST(CudaDevices, BadKernelSettingsAreRefusedByName) {
  JITLLM_REQUIRE_CUDA();
  const auto refusal = [](const cuda::CudaDeviceOptions& o) -> std::string {
    try {
      cuda::CudaDevice::create(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "(made a device)";
  };
  // The refusal with the environment variable `name` set to `value` for the call alone.
  const auto refusalWith = [&](const cuda::CudaDeviceOptions& o, const char* name, const char* value) {
    EXPECT_EQ(0, setenv(name, value, 1));
    const std::string refused = refusal(o);
    unsetenv(name);
    return refused;
  };
  cuda::CudaDeviceOptions o;
  o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
  o.settings.attentionSpan = 3;
  const std::string option = refusal(o);
  EXPECT_NE(option.find("attention span (JITLLM_CUDA_ATTENTION_SPAN): 3 is not 0, 2, 4 or 8"), std::string::npos)
      << option;
  o.settings.attentionSpan.reset();
  const std::string span = refusalWith(o, "JITLLM_CUDA_ATTENTION_SPAN", "four");
  EXPECT_NE(span.find("attention span (JITLLM_CUDA_ATTENTION_SPAN): 'four' is not 0, 2, 4 or 8"), std::string::npos)
      << span;
  o.settings.attentionSpan = 4;
  const std::string defines = refusalWith(o, "JITLLM_CUDA_DEFINES", "JL_UNROLL=2,JL_X");
  EXPECT_NE(defines.find("JITLLM_CUDA_DEFINES: 'JL_X' is not NAME=VALUE"), std::string::npos) << defines;
  o.settings.attentionRowTokens = 65;
  const std::string rows = refusal(o);
  EXPECT_NE(rows.find("attention tokens a block (JITLLM_CUDA_ATTENTION_ROWS): 65 is not 0 to 64"), std::string::npos)
      << rows;
  o.settings.attentionRowTokens.reset();
  const std::string rowsEnv = refusalWith(o, "JITLLM_CUDA_ATTENTION_ROWS", "8x");
  EXPECT_NE(rowsEnv.find("attention tokens a block (JITLLM_CUDA_ATTENTION_ROWS): '8x' is not 0 to 64"),
            std::string::npos)
      << rowsEnv;
}

}  // namespace
}  // namespace jitllm::testing
