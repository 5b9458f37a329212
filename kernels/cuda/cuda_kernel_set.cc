#include "kernels/cuda/cuda_kernel_set.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "base/error.h"

namespace jitllm::cuda {

CudaKernelSet::CudaKernelSet(const CudaContext& ctx, const std::string& cacheRoot,
                             std::vector<std::pair<std::string, int64_t>> defines, int attentionSpan)
    : ctx_(ctx), cache_(cacheRoot), tuningDefines_(std::move(defines)), attentionSpan_(attentionSpan) {}

CudaKernelSet::~CudaKernelSet() {
  for (auto& [key, m] : modules_) ctx_.api.cuModuleUnload(m);
}

ModuleSpec CudaKernelSet::tuned(const ModuleSpec& given) const {
  ModuleSpec spec = given;
  spec.defines.insert(spec.defines.end(), tuningDefines_.begin(), tuningDefines_.end());
  return spec;
}

std::string CudaKernelSet::cacheMaterial(const ModuleSpec& spec) const {
  std::string material = spec.source();
  for (const auto& o : compileOptions(ctx_.arch)) material += "\n//option " + o;
  material += "\n//arch " + std::to_string(ctx_.arch) + " nvrtc " + std::to_string(nvrtcVersionNumber()) + " driver " +
              std::to_string(ctx_.api.driverVersion) + "\n";
  return material;
}

CUmodule CudaKernelSet::module(const ModuleSpec& given) {
  const ModuleSpec spec = tuned(given);
  const std::string key = spec.key();
  if (auto it = modules_.find(key); it != modules_.end()) return it->second;
  if (prepared_) stats_.modulesMadeOnUse++;  // a shape prepare() did not foresee
  bool compiled = false;
  const std::vector<char> image = moduleImage(spec, compiled);
  return loadModule(key, image, compiled);
}

std::vector<char> CudaKernelSet::moduleImage(const ModuleSpec& tunedSpec, bool& compiled) const {
  const std::string material = cacheMaterial(tunedSpec);
  if (auto cached = cache_.load(material)) return std::move(*cached);
  std::vector<char> image = compileModule(tunedSpec, ctx_.arch).image;
  compiled = true;
  cache_.store(material, image);
  return image;
}

CUmodule CudaKernelSet::loadModule(std::string key, const std::vector<char>& image, bool compiled) {
  ctx_.makeCurrent();
  CUmodule m = nullptr;
  ctx_.check(ctx_.api.cuModuleLoadData(&m, image.data()), "cuModuleLoadData");
  modules_.emplace(std::move(key), m);
  stats_.modulesCompiled += compiled;
  return m;
}

CUfunction CudaKernelSet::function(CUmodule m, const char* name) {
  CUfunction f = nullptr;
  ctx_.check(ctx_.api.cuModuleGetFunction(&f, m, name), name);
  return f;
}

void CudaKernelSet::allowSharedBytes(CUfunction f, size_t bytes) {
  ctx_.check(ctx_.api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes)),
             "cuFuncSetAttribute");
}

// ---- the functions, by shape ----

CUfunction CudaKernelSet::matmul(quant::TensorType type, int64_t cols, int align, bool xvec, int variant) {
  const uint64_t key = (uint64_t(type) << 56) | (uint64_t(align) << 48) | (uint64_t(xvec) << 47) |
                       (uint64_t(variant) << 40) | uint64_t(cols);
  if (auto it = matmuls_.find(key); it != matmuls_.end()) return it->second;
  CUfunction f = function(module(matmulModule(type, cols, align, xvec, variant)), variant == 0 ? "get_rows" : "matmul");
  matmuls_.emplace(key, f);
  return f;
}

CUfunction CudaKernelSet::intMatmul(quant::TensorType type, int64_t cols, int align, int tokens, int rows, bool mma,
                                    int rowWarps) {
  JITLLM_ASSERT(cols > 0 && cols < (int64_t(1) << 30) && rowWarps > 0 && rowWarps < 8);
  const uint64_t key = (uint64_t(type) << 56) | (uint64_t(align) << 48) | (uint64_t(tokens) << 40) |
                       (uint64_t(rows) << 34) | (uint64_t(mma) << 33) | (uint64_t(rowWarps) << 30) | uint64_t(cols);
  if (auto it = intMatmuls_.find(key); it != intMatmuls_.end()) return it->second;
  CUfunction f = function(module(intMatmulModule(type, cols, align, tokens, rows, mma, rowWarps)), "matmul_int");
  intMatmuls_.emplace(key, f);
  return f;
}

CUfunction CudaKernelSet::intMatmulGroup(const std::vector<IntMatmulPart>& parts, int64_t cols, int align,
                                         int perWarpTokens) {
  // Looked up without building the module's spec and key: this runs twice per layer and step.
  GroupKey key{cols, align, perWarpTokens, 0, 0, 0};
  for (size_t i = 0; i < parts.size(); i++) key[3 + i] = int64_t(parts[i].type) * 64 + parts[i].rows;
  auto it = groupMatmuls_.find(key);
  if (it == groupMatmuls_.end()) {
    const ModuleSpec spec = intMatmulGroupModule(parts, cols, align, perWarpTokens);
    it = groupMatmuls_.emplace(key, function(module(spec), "matmul_int_group")).first;
  }
  return it->second;
}

const CudaKernelSet::PromptGemm& CudaKernelSet::promptGemm(quant::TensorType type, int64_t cols, int align,
                                                           int blockRows, int slice) {
  const std::array<int64_t, 4> key{int64_t(type), cols, align, blockRows};
  if (auto it = promptGemms_.find(key); it != promptGemms_.end()) return it->second;
  CUmodule m = module(promptGemmModule(type, cols, align, blockRows, slice));
  PromptGemm k{function(m, "dequant_f16"), function(m, "to_f16"), function(m, "gemm_f16")};
  const size_t shared = promptGemmSharedBytes(blockRows, slice);
  JITLLM_REQUIRE(shared <= size_t(ctx_.maxSharedOptIn), ctx_.id, ": gemm_f16 needs ", shared,
                 " bytes of shared memory a block");
  allowSharedBytes(k.gemm, shared);
  return promptGemms_.emplace(key, k).first->second;
}

CUfunction CudaKernelSet::attention(int headDim, int group, int pageTokens, bool f16) {
  const uint64_t key = (uint64_t(headDim) << 40) | (uint64_t(group) << 24) | (uint64_t(pageTokens) << 1) | f16;
  if (auto it = attentions_.find(key); it != attentions_.end()) return it->second;
  CUfunction f = function(module(attentionModule(headDim, group, pageTokens, f16, attentionSpan_)), "attention");
  attentions_.emplace(key, f);
  return f;
}

CUfunction CudaKernelSet::attentionRows(int headDim, int group, int pageTokens, bool f16, int perBlock) {
  const uint64_t key = (uint64_t(perBlock) << 52) | (uint64_t(headDim) << 40) | (uint64_t(group) << 24) |
                       (uint64_t(pageTokens) << 1) | f16;
  if (auto it = attentionRows_.find(key); it != attentionRows_.end()) return it->second;
  CUfunction f = nullptr;
  const size_t bytes = attentionRowsSharedBytes(headDim, group, perBlock);
  if (bytes <= size_t(ctx_.maxSharedOptIn)) {
    f = function(module(attentionModule(headDim, group, pageTokens, f16, attentionSpan_, perBlock)), "attention_rows");
    allowSharedBytes(f, bytes);
  }
  attentionRows_.emplace(key, f);
  return f;
}

CUfunction CudaKernelSet::attentionSplit(int headDim, int group, int pageTokens, bool f16) {
  const uint64_t key = (uint64_t(headDim) << 40) | (uint64_t(group) << 24) | (uint64_t(pageTokens) << 1) | f16;
  if (auto it = attentionSplits_.find(key); it != attentionSplits_.end()) return it->second;
  CUfunction f = function(module(attentionModule(headDim, group, pageTokens, f16, attentionSpan_)),
                          attentionSpan_ > 0 ? "attention_spans" : "attention_split");
  attentionSplits_.emplace(key, f);
  return f;
}

const CudaKernelSet::Elementwise& CudaKernelSet::elementwise() {
  if (!elementwise_) {
    CUmodule m = module(elementwiseModule());
    Elementwise k;
    k.rmsNorm = function(m, "rms_norm");
    k.rope = function(m, "rope");
    k.swiglu = function(m, "swiglu");
    k.geglu = function(m, "geglu");
    k.add = function(m, "add");
    k.scale = function(m, "scale");
    k.kvStore = function(m, "kv_store");
    k.ropeStore = function(m, "rope_store");
    elementwise_ = k;
  }
  return *elementwise_;
}

CUfunction CudaKernelSet::quantizeX() {
  if (!quantize_) quantize_ = function(module(elementwiseModule()), "quantize_x");
  return quantize_;
}

const std::pair<CUfunction, CUfunction>& CudaKernelSet::blockCopies() {
  if (!blockCopies_.first) {
    CUmodule m = module(blocksModule());
    blockCopies_ = {function(m, "gather_blocks"), function(m, "scatter_blocks")};
  }
  return blockCopies_;
}

CUfunction CudaKernelSet::selectCandidates() {
  if (!selectCandidates_) selectCandidates_ = function(module(samplingModule()), "select_candidates");
  return selectCandidates_;
}

// ---- made ahead ----

size_t CudaKernelSet::prepare(const std::vector<ModuleSpec>& given, std::chrono::steady_clock::time_point started) {
  std::vector<ModuleSpec> wanted;
  std::set<std::string> keys;
  for (const ModuleSpec& g : given) {
    ModuleSpec spec = tuned(g);
    std::string key = spec.key();
    if (!modules_.count(key) && keys.insert(std::move(key)).second) wanted.push_back(std::move(spec));
  }
  // Compiled (or read from the disk cache) on a thread per core; NVRTC programs are per call.
  struct Made {
    std::vector<char> image;
    bool compiled = false;
    std::optional<Error> error;
  };
  std::vector<Made> made(wanted.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < wanted.size();) {
      try {
        made[i].image = moduleImage(wanted[i], made[i].compiled);
      } catch (const Error& e) {
        made[i].error = e;
      }
    }
  };
  const size_t threads = std::min<size_t>(wanted.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; t++) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < wanted.size(); i++) {
    // A failed one: the op that needs it compiles it again and reports the error then.
    if (!made[i].error) loadModule(wanted[i].key(), made[i].image, made[i].compiled);
  }
  stats_.modulesPrepared += wanted.size();
  prepared_ = true;
  stats_.prepareSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return wanted.size();
}

}  // namespace jitllm::cuda
