// The kernels one CUDA device has loaded: each module NVRTC built for this GPU's exact
// architecture (kernel_library.h) - or found in the disk cache - specialised for the shapes and
// weight types the ops meet, with the device's tuning defines added; and the functions the ops
// launch, looked up once per shape and kept (the caches below are keyed without building a
// module's spec, which would cost more than the launch it serves).
//
// prepare() makes a whole workload's modules at once, compiled on one thread per core; a module
// an op has to make afterwards is counted (modulesMadeOnUse).
//
// Ownership: owns the loaded modules (unloaded when it goes) and the disk cache handle; borrows
// the context. Thread-safety: the executor thread; prepare() compiles on threads of its own
// inside the call.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/kernel_library.h"

namespace jitllm::cuda {

class CudaKernelSet final {
 public:
  struct Elementwise {
    CUfunction rmsNorm = nullptr, rope = nullptr, swiglu = nullptr, geglu = nullptr, add = nullptr, scale = nullptr,
               kvStore = nullptr, ropeStore = nullptr;
  };
  struct PromptGemm {  // gemm_f16.cuh's kernels
    CUfunction dequant = nullptr, toHalf = nullptr, gemm = nullptr;
  };
  struct Stats {
    uint64_t modulesPrepared = 0;   // modules prepare() made (compiled or from disk)
    uint64_t modulesCompiled = 0;   // modules NVRTC compiled (the rest came from the disk cache)
    uint64_t modulesMadeOnUse = 0;  // modules an op had to make after prepare() had run
    double prepareSeconds = 0;      // wall time in prepare(), from when its caller began
  };

  // cacheRoot: KernelCache's ("": no disk cache). defines: added to every module (CudaSettings::
  // defines, then JITLLM_CUDA_DEFINES). attentionSpan: the span attention modules fold chunks in
  // (CudaSettings::attentionSpan), the same for every attention kernel of this device.
  CudaKernelSet(const CudaContext& ctx, const std::string& cacheRoot,
                std::vector<std::pair<std::string, int64_t>> defines, int attentionSpan);
  ~CudaKernelSet();
  CudaKernelSet(const CudaKernelSet&) = delete;
  CudaKernelSet& operator=(const CudaKernelSet&) = delete;

  // The module of spec (plus the tuning defines), loaded or from the caches.
  CUmodule module(const ModuleSpec& spec);
  CUfunction function(CUmodule m, const char* name);

  // matmul.cuh: get_rows (variant 0) or matmul at `variant` tokens per warp.
  CUfunction matmul(quant::TensorType type, int64_t cols, int align, bool xvec, int variant);
  // matmul_int.cuh: matmul_int on the dp4a kernels or the tensor cores (mma).
  CUfunction intMatmul(quant::TensorType type, int64_t cols, int align, int tokens, int rows, bool mma,
                       int rowWarps = 4);
  // matmul_int_group for up to three parts of one input.
  CUfunction intMatmulGroup(const std::vector<IntMatmulPart>& parts, int64_t cols, int align, int perWarpTokens);
  // gemm_f16.cuh's kernels for a weight type, row length, alignment and block height (32, 64, 128),
  // at `slice` columns a stage, allowed their dynamic shared memory.
  const PromptGemm& promptGemm(quant::TensorType type, int64_t cols, int align, int blockRows, int slice);
  // attention.cuh: attention, one block per token and block of query heads.
  CUfunction attention(int headDim, int group, int pageTokens, bool f16);
  // attention_split of the same module: a decode token's chunks over many blocks; attention_spans
  // when chunks fold in spans (attentionSpan() > 0).
  CUfunction attentionSplit(int headDim, int group, int pageTokens, bool f16);
  // attention_rows at `perBlock` tokens a block, allowed its dynamic shared memory; null when that
  // does not fit this GPU (sm_75's 64 KiB: the kernel holds two K/V tiles).
  CUfunction attentionRows(int headDim, int group, int pageTokens, bool f16, int perBlock);
  const Elementwise& elementwise();
  CUfunction quantizeX();                                  // quantize_x (in the elementwise module)
  const std::pair<CUfunction, CUfunction>& blockCopies();  // gather_blocks, scatter_blocks
  CUfunction selectCandidates();
  int attentionSpan() const { return attentionSpan_; }

  // Makes every module of `given` not loaded yet - compiled on one thread per core, or read from
  // the disk cache - then loads them; counts the time from `started` (when the caller began
  // choosing them). A module that fails is left out: the op that needs it compiles it again and
  // reports the error then. Returns how many it made.
  size_t prepare(const std::vector<ModuleSpec>& given, std::chrono::steady_clock::time_point started);
  const Stats& stats() const { return stats_; }
  const std::string& cacheDirectory() const { return cache_.directory(); }

 private:
  // spec with the tuning defines, as module() keys it; the disk cache's key material for it.
  ModuleSpec tuned(const ModuleSpec& spec) const;
  std::string cacheMaterial(const ModuleSpec& tunedSpec) const;
  // A tuned spec's cubin: from the disk cache, else compiled by NVRTC (`compiled` set) and stored
  // there. Touches no device state: prepare() calls it from many threads at once.
  std::vector<char> moduleImage(const ModuleSpec& tunedSpec, bool& compiled) const;
  // Loads the image into this device's context as the module keyed `key`, counting a compile.
  CUmodule loadModule(std::string key, const std::vector<char>& image, bool compiled);
  // Allows f `bytes` of dynamic shared memory.
  void allowSharedBytes(CUfunction f, size_t bytes);

  // matmul_int_group by {cols, align, tokens per warp, then per part type * 64 + rows per warp}.
  using GroupKey = std::array<int64_t, 6>;

  const CudaContext& ctx_;
  KernelCache cache_;
  std::vector<std::pair<std::string, int64_t>> tuningDefines_;
  int attentionSpan_ = 0;
  std::unordered_map<std::string, CUmodule> modules_;
  std::unordered_map<uint64_t, CUfunction> matmuls_;
  std::unordered_map<uint64_t, CUfunction> intMatmuls_;
  std::map<GroupKey, CUfunction> groupMatmuls_;
  std::map<std::array<int64_t, 4>, PromptGemm> promptGemms_;
  std::unordered_map<uint64_t, CUfunction> attentions_;
  std::unordered_map<uint64_t, CUfunction> attentionSplits_;
  std::unordered_map<uint64_t, CUfunction> attentionRows_;
  std::optional<Elementwise> elementwise_;
  std::pair<CUfunction, CUfunction> blockCopies_{};
  CUfunction quantize_ = nullptr;
  CUfunction selectCandidates_ = nullptr;
  bool prepared_ = false;  // prepare() has run: a module made on use after it is counted
  Stats stats_;
};

}  // namespace jitllm::cuda
