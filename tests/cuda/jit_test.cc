// The CUDA JIT without a GPU: NVRTC, the source cache keys, the on-disk cache giving back exactly
// what it was given (every variant for every architecture: jit_architectures_test.cc).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "engine/devices/builtin_backends.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/kernel_library.h"
#include "kernels/cuda/kernel_sources.h"

namespace jitllm::testing {
namespace {

TEST(CudaJit, NvrtcLoadsAndNamesItsVersionAndArchitectures) {
  const int version = cuda::nvrtcVersionNumber();
  std::printf("NVRTC %d.%d\n", version / 1000, version % 1000 / 10);
  EXPECT_GE(version, 11000);
  const auto archs = cuda::nvrtcArchitectures();
  for (int arch : {75, 86, 89, 90}) EXPECT_NE(std::find(archs.begin(), archs.end(), arch), archs.end()) << arch;
}

// Profiling runs (JITLLM_CUDA_SOURCE_DIR): line info in the cubin, naming a file that holds the
// module's whole source; without the variable, neither (the options are part of the cache key,
// so the two never share a cached binary).
TEST(CudaJit, AProfilingSourceDirAddsLineInfoNamingTheModulesSource) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllm-src-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const auto spec = cuda::elementwiseModule();
  const auto plain = cuda::compileModule(spec, 90);
  const auto hasLineOption = [] {
    const auto o = cuda::compileOptions(90);
    return std::find(o.begin(), o.end(), "--generate-line-info") != o.end();
  };
  EXPECT_FALSE(hasLineOption());
  ASSERT_EQ(0, setenv("JITLLM_CUDA_SOURCE_DIR", dir.c_str(), 1));
  EXPECT_TRUE(hasLineOption());
  cuda::CompiledModule profiled;
  try {
    profiled = cuda::compileModule(spec, 90);
  } catch (...) {
    unsetenv("JITLLM_CUDA_SOURCE_DIR");
    throw;
  }
  unsetenv("JITLLM_CUDA_SOURCE_DIR");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("elementwise-", 0), 0u) << files[0];
  std::ifstream in(files[0], std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, spec.source());
  const std::string image(profiled.image.begin(), profiled.image.end()),
      plainImage(plain.image.begin(), plain.image.end());
  EXPECT_NE(image.find(files[0].filename().string()), std::string::npos) << "the line info does not name the file";
  EXPECT_EQ(plainImage.find("elementwise-"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(CudaJit, AnArchitectureNewerThanNvrtcKnowsFallsBackToPtx) {
  const auto archs = cuda::nvrtcArchitectures();
  ASSERT_FALSE(archs.empty());
  const int beyond = archs.back() + 1;  // no such sm_ in this NVRTC
  const auto m = cuda::compileModule(cuda::elementwiseModule(), beyond);
  EXPECT_FALSE(m.cubin);
  EXPECT_NE(std::string(m.image.data()).find(".entry rms_norm"), std::string::npos);
}

TEST(CudaJit, ABrokenVariantFailsWithTheCompilerLog) {
  cuda::ModuleSpec bad = cuda::matmulModule(quant::TensorType::kQ4_K, 256, 16, true, 1);
  bad.defines.front().second = 99;  // JL_WTYPE no kernel decodes
  try {
    cuda::compileModule(bad, 90);
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("JL_WTYPE"), std::string::npos) << e.what();
  }
}

// Kernels are launched with programmatic dependent launch on sm_90 (docs/cuda.md): one that
// touched memory before griddepcontrol.wait could read what the kernel before it has not written
// yet, or overwrite what it still reads - a race no other test is sure to catch. The only
// exception is the integer products' productWarp, which loads weights (never written by a kernel)
// before it waits: the kernels that use it say so in their first line.
TEST(CudaJit, EveryKernelWaitsForTheKernelBeforeItBeforeAnythingElse) {
  int kernels = 0;
  for (const char* file : {"matmul.cuh", "matmul_int.cuh", "attention.cuh", "elementwise.cuh", "quantize_x.cuh",
                           "weights.cuh", "common.cuh", "blocks.cuh", "gemm_f16.cuh"}) {
    const std::string_view source = cuda::kernelSource(file);
    ASSERT_FALSE(source.empty()) << file;
    for (size_t at = source.find("__global__"); at != std::string_view::npos; at = source.find("__global__", at + 1)) {
      const size_t open = source.find('{', at);
      ASSERT_NE(open, std::string_view::npos);
      size_t first = open + 1;
      while (first < source.size() && std::isspace(static_cast<unsigned char>(source[first]))) first++;
      const std::string_view signature = source.substr(at, open - at);
      const std::string_view body = source.substr(first, source.find("\n}", first) - first);
      const bool waitsInProductWarp =
          source.substr(first).starts_with("// awaitPreviousKernel() is in productWarp") &&
          (body.find("productWarp<") != std::string_view::npos || body.find("groupPart<") != std::string_view::npos);
      EXPECT_TRUE(source.substr(first).starts_with("awaitPreviousKernel();") || waitsInProductWarp)
          << file << ": this kernel does not begin with it: " << signature.substr(0, 160);
      kernels++;
    }
  }
  EXPECT_GE(kernels, 21);  // every kernel of the files above was seen
  // productWarp waits after its weight loads and before anything else.
  const std::string_view matmul = cuda::kernelSource("matmul_int.cuh");
  const size_t warp = matmul.find("JL_DEV void productWarp(");
  ASSERT_NE(warp, std::string_view::npos);
  const std::string_view warpBody = matmul.substr(warp, matmul.find("\n}", warp) - warp);
  const size_t wait = warpBody.find("awaitPreviousKernel();");
  ASSERT_NE(wait, std::string_view::npos);
  for (const char* touch : {"loadX(", "storeLaneSums", "xq +", "y[", "bias["}) {
    EXPECT_GT(warpBody.find(touch), wait) << touch << " before the wait";
  }
}

TEST(CudaJit, TheDiskCacheReturnsWhatItStoredAndRejectsTornFiles) {
  const std::string root =
      (std::filesystem::temp_directory_path() / ("jitllm-cuda-cache-" + std::to_string(getpid()))).string();
  cuda::KernelCache cache(root);
  ASSERT_TRUE(cache.enabled());
  const std::vector<char> image = {'c', 'u', 'b', 'i', 'n', '\0', 'x'};
  EXPECT_FALSE(cache.load("key one"));
  cache.store("key one", image);
  EXPECT_EQ(cache.load("key one"), image);
  EXPECT_FALSE(cache.load("key two"));
  // Truncate the file: it must be ignored, not loaded.
  for (const auto& entry : std::filesystem::directory_iterator(cache.directory())) {
    std::filesystem::resize_file(entry.path(), std::filesystem::file_size(entry.path()) - 1);
  }
  EXPECT_FALSE(cache.load("key one"));
  cuda::KernelCache off("");
  EXPECT_FALSE(off.enabled());
  off.store("key one", image);
  EXPECT_FALSE(off.load("key one"));
  std::filesystem::remove_all(root);
}

// The wide tensor-core blocks only where they still give every multiprocessor a block (an H200's
// 132), unless the width was asked for; 32 tokens or fewer always take the narrow blocks.
TEST(CudaJit, TensorCoreProductsTakeWideBlocksOnlyWhereTheyStillFillTheGpu) {
  constexpr int kSms = 132;
  EXPECT_EQ(64, cuda::tensorCoreBlockTokens(8192, 512, 64, false, kSms));  // 128 x 8 blocks
  EXPECT_EQ(64, cuda::tensorCoreBlockTokens(2048, 512, 64, false, kSms));  // 32 x 8 = 256
  EXPECT_EQ(32, cuda::tensorCoreBlockTokens(512, 512, 64, false, kSms));   // 8 x 8 = 64: too few
  EXPECT_EQ(32, cuda::tensorCoreBlockTokens(1024, 512, 64, false, kSms));  // 16 x 8 = 128: too few
  EXPECT_EQ(64, cuda::tensorCoreBlockTokens(1024, 520, 64, false, kSms));  // 16 x 9 = 144
  EXPECT_EQ(64, cuda::tensorCoreBlockTokens(512, 512, 64, true, kSms));    // asked for
  EXPECT_EQ(32, cuda::tensorCoreBlockTokens(8192, 32, 64, true, kSms));    // one narrow block of tokens
  EXPECT_EQ(32, cuda::tensorCoreBlockTokens(8192, 512, 32, false, kSms));  // the narrow width asked for
  EXPECT_EQ(32, cuda::tensorCoreBlockTokens(8192, 33, 64, false, kSms));   // 128 x 1 blocks: too few
  EXPECT_EQ(64, cuda::tensorCoreBlockTokens(8448, 33, 64, false, kSms));   // 132 x 1
}

// Decode batches on the tensor cores: the tallest tile that still gives each SM a block, else the
// shortest a block of that width allows.
TEST(CudaJit, TensorCoreTilesShrinkUntilEverySmHasABlock) {
  constexpr int kSms = 132;
  EXPECT_EQ(4, cuda::tensorCoreRowWarps(8192, 512, 64, kSms));  // prefill: 128 x 8 tall blocks
  EXPECT_EQ(4, cuda::tensorCoreRowWarps(8448, 32, 32, kSms));   // 132 x 1
  EXPECT_EQ(2, cuda::tensorCoreRowWarps(8192, 32, 32, kSms));   // 128 tall, 256 of 32 rows
  EXPECT_EQ(1, cuda::tensorCoreRowWarps(2048, 32, 32, kSms));   // 32 tall, 64 middle, 128 short
  EXPECT_EQ(1, cuda::tensorCoreRowWarps(2048, 64, 32, kSms));   // 64 middle x 2 token blocks: 128 < 132
  EXPECT_EQ(2, cuda::tensorCoreRowWarps(512, 512, 64, kSms));   // 64-token blocks: never one row warp
  // Every choice is a tile the kernel has (its module names it only when it is not the default).
  for (int warps : {1, 2}) {
    const auto spec = cuda::intMatmulModule(quant::TensorType::kQ4_K, 2048, 16, 16, 16, true, warps);
    EXPECT_NE(spec.key().find("JL_MMA_ROW_WARPS"), std::string::npos) << warps;
  }
  EXPECT_EQ(cuda::intMatmulModule(quant::TensorType::kQ4_K, 2048, 16, 16, 16, true, 4).key(),
            cuda::intMatmulModule(quant::TensorType::kQ4_K, 2048, 16, 16, 16, true).key());
}

TEST(CudaJit, WithoutADriverCudaDevicesAreAbsentWithAReasonNotACrash) {
  if (cuda::CudaDevice::count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string why = cuda::CudaDevice::unavailableReason();
  EXPECT_FALSE(why.empty());
  std::printf("no CUDA device here: %s\n", why.c_str());
  try {
    runtime::createDevices("cpu:0,cuda:0", {});
    FAIL() << "cuda:0 cannot exist here";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace jitllm::testing
