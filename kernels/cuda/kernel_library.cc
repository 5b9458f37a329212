#include "kernels/cuda/kernel_library.h"

#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "base/atomic_file.h"
#include "base/error.h"
#include "kernels/cuda/kernel_sources.h"
#include "kernels/device.h"

namespace jitllm::cuda {
namespace {

using quant::TensorType;

std::string_view requireSource(const std::string& name) {
  const std::string_view text = kernelSource(name);
  JITLLM_ASSERT(!text.empty());
  return text;
}

void checkNvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) JITLLM_FAIL(kFailed, "NVRTC ", what, ": ", nvrtcGetErrorString(r));
}

uint64_t fnv1a64(std::string_view bytes, uint64_t h) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr uint64_t kSeedA = 0xcbf29ce484222325ull, kSeedB = 0x84222325cbf29ce4ull;

constexpr char kMagic[8] = {'J', 'L', 'C', 'U', 'B', 'I', 'N', '1'};

}  // namespace

std::string ModuleSpec::key() const {
  std::string k = file;
  for (const auto& [name, value] : defines) k += " " + name + "=" + std::to_string(value);
  return k;
}

std::string ModuleSpec::source() const {
  std::string s;
  for (const auto& [name, value] : defines) s += "#define " + name + " " + std::to_string(value) + "\n";
  s += requireSource("common.cuh");
  if (file == "matmul.cuh" || file == "matmul_int.cuh" || file == "gemm_f16.cuh") s += requireSource("weights.cuh");
  if (file == "elementwise.cuh" || file == "attention.cuh") s += requireSource("quantize_x.cuh");
  s += requireSource(file);
  return s;
}

bool cudaSupportsWeightType(TensorType type) {
  switch (type) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ8_0:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
      return true;
    default:
      return false;
  }
}

ModuleSpec matmulModule(TensorType type, int64_t k, int align, bool xvec, int variant) {
  JITLLM_ASSERT(cudaSupportsWeightType(type));
  return ModuleSpec{"matmul.cuh",
                    {{"JL_WTYPE", int64_t(type)},
                     {"JL_K", k},
                     {"JL_ALIGN", align},
                     {"JL_XVEC", xvec ? 1 : 0},
                     {"JL_VARIANT", variant}}};
}

bool cudaIntegerMatmulType(TensorType type, int64_t k) {
  return (type == TensorType::kQ4_K || type == TensorType::kQ6_K) && k % 256 == 0;
}

int intMatmulRowsPerWarp(TensorType type, int64_t k, int rows) {
  const int64_t units = k / 64;  // q4_K and q6_K units are both 64 elements (matmul_int.cuh)
  return units % 32 != 0 && units % 16 == 0 ? 2 * rows : rows;
}

ModuleSpec intMatmulModule(TensorType type, int64_t k, int align, int tokens, int rows, bool mma, int rowWarps) {
  JITLLM_ASSERT(cudaIntegerMatmulType(type, k));
  ModuleSpec spec{
      "matmul_int.cuh",
      {{"JL_WTYPE", int64_t(type)}, {"JL_K", k}, {"JL_ALIGN", align}, {"JL_TOKENS", tokens}, {"JL_ROWS", rows}}};
  if (mma) {
    JITLLM_ASSERT((type == TensorType::kQ6_K || align >= 16) && (tokens == 16 || tokens == 32) && rows == 16);
    JITLLM_ASSERT((rowWarps == 1 && tokens == 16) || rowWarps == 2 || rowWarps == 4);
    spec.defines.emplace_back("JL_MMA", 1);
    if (rowWarps != 4) spec.defines.emplace_back("JL_MMA_ROW_WARPS", rowWarps);  // (4: the default's key)
  }
  return spec;
}

int tensorCoreRowWarps(int64_t rows, int64_t tokens, int blockTokens, int multiprocessors) {
  const int64_t tokenBlocks = (tokens + blockTokens - 1) / blockTokens;
  for (int warps : {4, 2}) {
    if ((rows + 16 * warps - 1) / (16 * warps) * tokenBlocks >= multiprocessors) return warps;
  }
  return blockTokens == 32 ? 1 : 2;  // a block of one row warp stages at most 32 tokens
}

int tensorCoreBlockTokens(int64_t rows, int64_t tokens, int width, bool widthChosen, int multiprocessors) {
  JITLLM_ASSERT(width == 32 || width == 64);
  if (tokens <= 32) return 32;
  const int64_t wideBlocks = (rows + 63) / 64 * ((tokens + width - 1) / width);
  return widthChosen || wideBlocks >= multiprocessors ? width : 32;
}

ModuleSpec promptGemmModule(TensorType type, int64_t k, int align, int blockRows, int sliceK) {
  JITLLM_ASSERT(cudaSupportsWeightType(type) && (sliceK == 32 || sliceK == 64) && k % sliceK == 0);
  JITLLM_ASSERT(blockRows == 32 || blockRows == 64 || blockRows == 128);
  ModuleSpec spec{"gemm_f16.cuh",
                  {{"JL_WTYPE", int64_t(type)}, {"JL_K", k}, {"JL_ALIGN", align}, {"JL_BM", blockRows}}};
  if (sliceK != 32) spec.defines.emplace_back("JL_BK", sliceK);
  return spec;
}

ModuleSpec intMatmulGroupModule(const std::vector<IntMatmulPart>& parts, int64_t k, int align, int tokens) {
  JITLLM_ASSERT(parts.size() == 2 || parts.size() == 3);
  ModuleSpec spec{"matmul_int.cuh",
                  {{"JL_PARTS", int64_t(parts.size())}, {"JL_K", k}, {"JL_ALIGN", align}, {"JL_TOKENS", tokens}}};
  for (size_t i = 0; i < parts.size(); i++) {
    JITLLM_ASSERT(cudaIntegerMatmulType(parts[i].type, k));
    spec.defines.emplace_back("JL_W" + std::to_string(i), int64_t(parts[i].type));
    spec.defines.emplace_back("JL_R" + std::to_string(i), parts[i].rows);
  }
  return spec;
}

ModuleSpec attentionModule(int headDim, int group, int pageTokens, bool kvF16, int span, int qTokens) {
  ModuleSpec spec{"attention.cuh",
                  {{"JL_HD", headDim}, {"JL_GROUP", group}, {"JL_PAGE_TOKENS", pageTokens}, {"JL_KV_F16", kvF16}}};
  if (span > 0) spec.defines.emplace_back("JL_SPAN", span);
  if (qTokens != kDefaultAttentionRowTokens) spec.defines.emplace_back("JL_QTOKENS", qTokens);
  return spec;
}

int defaultAttentionRowTokens(int headDim) { return headDim >= 128 ? 16 : kDefaultAttentionRowTokens; }

bool attentionRowsSupported(int headDim) {
  return headDim % 4 == 0 && kAttentionRowThreads % (headDim / 4) == 0 && headDim <= 256;
}

size_t attentionRowsSharedBytes(int headDim, int group, int qTokens) {
  // attention.cuh: qs[rows][hd] | ks[2][tile][hd + 4] | vs[2][tile][hd] | ps[rows][tile + 16] | 5 per row.
  const size_t tile = size_t(std::min(64, 4096 / headDim)), rows = size_t(qTokens) * size_t(group),
               hd = size_t(headDim);
  return 4 * (rows * hd + 2 * tile * (hd + 4) + 2 * tile * hd + rows * (tile + 16) + 5 * rows);
}

ModuleSpec elementwiseModule() { return ModuleSpec{"elementwise.cuh", {}}; }
ModuleSpec blocksModule() { return ModuleSpec{"blocks.cuh", {}}; }
ModuleSpec samplingModule() { return ModuleSpec{"sampling.cuh", {}}; }

std::vector<ModuleSpec> representativeModules() {
  std::vector<ModuleSpec> specs;
  for (TensorType t :
       {TensorType::kF32, TensorType::kF16, TensorType::kBF16, TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
        TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    for (int variant : kMatmulVariants) specs.push_back(matmulModule(t, 2048, 16, true, variant));
    const bool isFloat = quant::typeTraits(t).blockElems == 1;
    specs.push_back(matmulModule(t, isFloat ? 517 : 512, 2, false, 1));  // padded rows, odd length
  }
  for (TensorType t : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    for (const auto& [tokens, rows] : kIntMatmulVariants) specs.push_back(intMatmulModule(t, 2048, 16, tokens, rows));
    specs.push_back(intMatmulModule(t, 3072, 2, 1, 1));  // a 3B row, rows only 2-byte aligned
  }
  // Grouped products as decode runs them: q, k and v (v in q6_K), gate and up at 2 rows per warp,
  // a 3B row; and 4 tokens per warp (a batch of sessions).
  using T = TensorType;
  specs.push_back(intMatmulGroupModule({{T::kQ4_K, 1}, {T::kQ4_K, 1}, {T::kQ6_K, 1}}, 2048, 16, 1));
  specs.push_back(intMatmulGroupModule({{T::kQ4_K, 2}, {T::kQ4_K, 2}}, 2048, 16, 1));
  specs.push_back(intMatmulGroupModule({{T::kQ4_K, 1}, {T::kQ4_K, 1}, {T::kQ4_K, 1}}, 3072, 4, 1));
  specs.push_back(intMatmulGroupModule({{T::kQ4_K, 4}, {T::kQ6_K, 4}}, 2048, 16, 4));
  specs.push_back(intMatmulGroupModule({{T::kQ4_K, 2}, {T::kQ4_K, 2}}, 2048, 16, 16));
  // The tensor-core kernels: 32 lane slots (2048) and 16 (3072); q6_K at any alignment; 16 and 32
  // tokens a warp; and the short tiles of decode batches (1 and 2 row warps).
  for (TensorType t : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    for (int tokens : {16, 32}) {
      specs.push_back(intMatmulModule(t, 2048, 16, tokens, 16, true));
      specs.push_back(intMatmulModule(t, 3072, t == TensorType::kQ6_K ? 2 : 16, tokens, 16, true));
      specs.push_back(intMatmulModule(t, 2048, 16, tokens, 16, true, 2));
    }
    specs.push_back(intMatmulModule(t, 2048, 16, 16, 16, true, 1));
  }
  // The butterfly's lane order (JITLLM_CUDA_DEFINES=JL_LANE_CHAIN=0): decode's kernel, the dp4a
  // prefill kernel's and the tensor-core kernel with its stack of partial sums.
  for (TensorType t : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    for (const auto& [tokens, rows, mma] : {std::tuple{1, 2, false}, {16, 4, false}, {16, 16, true}}) {
      ModuleSpec butterfly = intMatmulModule(t, 2048, 16, tokens, rows, mma);
      butterfly.defines.emplace_back("JL_LANE_CHAIN", 0);
      specs.push_back(butterfly);
    }
  }
  // The prompt path: each block height at both slice widths, q6_K at the 3B's row length (2-byte
  // aligned rows), the other quantized types and f16 at one.
  for (int h : {32, 64, 128}) {
    specs.push_back(promptGemmModule(TensorType::kQ4_K, 2048, 16, h));
    specs.push_back(promptGemmModule(TensorType::kQ4_K, 2048, 16, h, 64));
  }
  specs.push_back(promptGemmModule(TensorType::kQ6_K, 3072, 2, 128, 64));
  for (TensorType t : {TensorType::kF16, TensorType::kQ4_0, TensorType::kQ8_0, TensorType::kQ5_K})
    specs.push_back(promptGemmModule(t, 2048, 16, 32, 64));
  constexpr int kSpan = kDefaultAttentionSpan;
  for (int hd : {64, 128}) {
    for (int group : {1, 4, 7}) specs.push_back(attentionModule(hd, group, 16, group == 4, kSpan));
    specs.push_back(attentionModule(hd, 1, 16, true, kSpan));  // decode's per-query-head blocks on fp16 pages
    // Tiles by plain loads (JITLLM_CUDA_DEFINES=JL_ATTN_PREFETCH=0), decode's blocks and prefill's.
    for (int group : {1, 4}) {
      ModuleSpec plainLoads = attentionModule(hd, group, 16, false, kSpan);
      plainLoads.defines.emplace_back("JL_ATTN_PREFETCH", 0);
      specs.push_back(plainLoads);
    }
    // The other folds (JITLLM_CUDA_ATTENTION_SPAN=0 or 4), decode's and prefill's blocks.
    for (int span : {0, 4}) {
      specs.push_back(attentionModule(hd, 1, 16, false, span));
      specs.push_back(attentionModule(hd, 4, 16, true, span));
    }
  }
  specs.push_back(attentionModule(16, 3, 4, true, kSpan));
  // Gemma 3's 256-wide heads (a thread per column: 256-thread blocks): decode's per-query-head
  // blocks, its 1B's group of 4 and 4B's of 2, and the 1B's prefill rows.
  for (int group : {1, 2, 4}) specs.push_back(attentionModule(256, group, 16, group == 2, kSpan));
  specs.push_back(attentionModule(256, 4, 16, false, kSpan, defaultAttentionRowTokens(256)));
  // attention_rows at other tokens a block (JITLLM_CUDA_ATTENTION_ROWS): 16 (64 rows of 64
  // columns), 3 (9 rows: blocks' rows not a multiple of the threads' row split), and the 3B shape's
  // default.
  specs.push_back(attentionModule(64, 4, 16, false, kSpan, 16));
  specs.push_back(attentionModule(128, 3, 16, true, kSpan, 3));
  specs.push_back(attentionModule(128, 3, 16, false, kSpan, defaultAttentionRowTokens(128)));  // the 3B's prefill
  specs.push_back(elementwiseModule());
  specs.push_back(blocksModule());
  specs.push_back(samplingModule());
  return specs;
}

int nvrtcVersionNumber() {
  int major = 0, minor = 0;
  checkNvrtc(nvrtcVersion(&major, &minor), "version");
  return major * 1000 + minor * 10;
}

std::vector<int> nvrtcArchitectures() {
  int n = 0;
  checkNvrtc(nvrtcGetNumSupportedArchs(&n), "supported architectures");
  std::vector<int> archs(size_t(std::max(n, 0)));
  if (n > 0) checkNvrtc(nvrtcGetSupportedArchs(archs.data()), "supported architectures");
  return archs;
}

std::string profilingSourceDir() {
  const char* dir = std::getenv("JITLLM_CUDA_SOURCE_DIR");
  return dir ? dir : "";
}

std::vector<std::string> compileOptions(int arch) {
  const auto archs = nvrtcArchitectures();
  std::string target;
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) {
    target = "--gpu-architecture=sm_" + std::to_string(arch);
  } else {
    int best = 0;
    for (int a : archs) {
      if (a <= arch) best = std::max(best, a);
    }
    JITLLM_REQUIRE(best > 0, "NVRTC ", nvrtcVersionNumber(), " cannot compile for sm_", arch);
    target = "--gpu-architecture=compute_" + std::to_string(best);
  }
  // fmad off: a*b+c rounds twice, as on the CPU; the kernels ask for fused multiply-adds with
  // fmaf() where they want them. No fast math: expf, division and sqrt stay IEEE.
  std::vector<std::string> options = {target, "--std=c++17", "--fmad=false"};
  if (!profilingSourceDir().empty()) options.push_back("--generate-line-info");
  return options;
}

CompiledModule compileModule(const ModuleSpec& spec, int arch) {
  const std::string source = spec.source();
  const std::vector<std::string> options = compileOptions(arch);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  // Profiling runs: the source the line info points at, as a file named after its contents.
  std::string name = spec.file;
  if (const std::string dir = profilingSourceDir(); !dir.empty()) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(source, kSeedA)));
    name = dir + "/" + std::filesystem::path(spec.file).stem().string() + "-" + hash + ".cu";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::ofstream out(name, std::ios::binary | std::ios::trunc);
    out << source;
    JITLLM_REQUIRE(out.good() && !ec, "JITLLM_CUDA_SOURCE_DIR: cannot write ", name);
  }
  nvrtcProgram prog = nullptr;
  checkNvrtc(nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr), "create program");
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  const nvrtcResult compiled = nvrtcCompileProgram(prog, int(argv.size()), argv.data());
  CompiledModule out;
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  if (logSize > 1) {
    out.log.resize(logSize);
    nvrtcGetProgramLog(prog, out.log.data());
    out.log.resize(logSize - 1);
  }
  if (compiled != NVRTC_SUCCESS) {
    JITLLM_FAIL(kFailed, "NVRTC could not compile ", spec.key(), " for sm_", arch, ": ", nvrtcGetErrorString(compiled),
                "\n", out.log);
  }
  out.cubin = options.front().find("sm_") != std::string::npos;
  size_t size = 0;
  if (out.cubin) {
    checkNvrtc(nvrtcGetCUBINSize(prog, &size), "cubin size");
    out.image.resize(size);
    checkNvrtc(nvrtcGetCUBIN(prog, out.image.data()), "cubin");
  } else {
    checkNvrtc(nvrtcGetPTXSize(prog, &size), "ptx size");
    out.image.resize(size);
    checkNvrtc(nvrtcGetPTX(prog, out.image.data()), "ptx");
  }
  return out;
}

std::string KernelCache::defaultRoot() { return cacheRoot(); }

KernelCache::KernelCache(const std::string& root) {
  if (root.empty()) return;
  directory_ = root + "/cuda";
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec) directory_.clear();  // a read-only home, say: run without a disk cache
}

std::string KernelCache::pathFor(const std::string& keyMaterial) const {
  char name[48];
  std::snprintf(name, sizeof name, "%016llx%016llx.cubin",
                static_cast<unsigned long long>(fnv1a64(keyMaterial, kSeedA)),
                static_cast<unsigned long long>(fnv1a64(keyMaterial, kSeedB)));
  return directory_ + "/" + name;
}

std::optional<std::vector<char>> KernelCache::load(const std::string& keyMaterial) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(pathFor(keyMaterial), std::ios::binary);
  if (!in) return std::nullopt;
  char magic[8];
  uint64_t size = 0, check = 0, keyCheck = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&keyCheck), 8) || keyCheck != fnv1a64(keyMaterial, 0x9e3779b97f4a7c15ull)) {
    return std::nullopt;
  }
  if (!in.read(reinterpret_cast<char*>(&size), 8) || !in.read(reinterpret_cast<char*>(&check), 8)) return std::nullopt;
  if (size > (uint64_t(1) << 30)) return std::nullopt;
  std::vector<char> image(size);
  if (!in.read(image.data(), std::streamsize(size))) return std::nullopt;
  if (fnv1a64(std::string_view(image.data(), image.size()), kSeedA) != check) return std::nullopt;
  return image;
}

void KernelCache::store(const std::string& keyMaterial, const std::vector<char>& image) const {
  if (!enabled()) return;
  const std::string path = pathFor(keyMaterial);
  const uint64_t keyCheck = fnv1a64(keyMaterial, 0x9e3779b97f4a7c15ull);
  const uint64_t size = image.size();
  const uint64_t check = fnv1a64(std::string_view(image.data(), image.size()), kSeedA);
  std::string file(kMagic, 8);
  for (const uint64_t* field : {&keyCheck, &size, &check}) file.append(reinterpret_cast<const char*>(field), 8);
  file.append(image.data(), image.size());
  writeFileAtomically(path, file);  // a full disk only costs a recompile later
}

}  // namespace jitllm::cuda
