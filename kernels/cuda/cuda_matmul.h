// The matrix products of one CUDA device and how each runs:
// - float products (matmul.cuh) for the weight types the integer kernels do not take;
// - q4_K and q6_K products on integer dot products (matmul_int.cuh: dp4a), their input quantized
//   once (quantize_x, or fused into the op that produced it: FusionState::producer) into a scratch
//   buffer that q, k and v (gate and up) share;
// - from kTensorCoreMinTokens tokens, those on int8 tensor cores (the same bits);
// - the products of one input in one launch (matmul_int_group) in decode shapes;
// - prompt rows (setPromptRows) on the prompt path's fp16 tensor cores (CudaPromptPath).
// prepareKernels asks wantModules for the modules, by the same choices the products make.
//
// Ownership: owns the quantized-activation scratch; borrows its device's other parts.
// Thread-safety: the executor thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cuda/cuda_kernel_set.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_op_queue.h"
#include "kernels/cuda/cuda_prompt_path.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/device.h"

namespace jitllm::cuda {

class CudaMatmul final {
 public:
  CudaMatmul(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
             CudaPromptPath& prompt, const ResolvedCudaSettings& settings);

  // Device::matmul (the op's tokens set in the queue, and tokens and rows not 0).
  void matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias);
  // Device::matmuls as one matmul_int_group launch where every product runs on the dp4a kernels
  // (integer types, one row length) in decode shapes, with no prompt rows and no output
  // overlapping the input or another; false, having done nothing, otherwise.
  bool matmulsInOneLaunch(std::span<const MatmulTarget> targets, const float* x, int64_t tokens);
  // The modules the products of `ws` (one input's) choose at every token count up to maxTokens.
  void wantModules(std::span<const WeightRef> ws, int64_t maxTokens, std::vector<ModuleSpec>& out) const;

  uint64_t separateQuantizations() const { return separateQuantizations_; }
  uint64_t fusedQuantizations() const { return fusedQuantizations_; }
  uint64_t groupedProducts() const { return groupedProducts_; }
  uint64_t tensorCoreProducts() const { return tensorCoreProducts_; }

 private:
  // How an integer product of w (rows at `align`) over `tokens` runs: on the tensor cores (mma,
  // `tokens` then a block's tokens / 2, 16 rows) or on the dp4a kernels (tokens and rows per warp).
  struct IntProduct {
    bool mma = false;
    int tokens = 1;
    int rows = 1;
    int rowWarps = 4;  // mma: a block's row warps (tensorCoreRowWarps)
  };
  // The fewest tokens a q4_K/q6_K product takes to the tensor cores. Below it their tiles (64 rows
  // x 32 tokens a block) leave most SMs idle and the dp4a kernels are faster; at 32 the two are
  // even, at 64 the tensor cores win (docs/benchmarks.md, "Serving").
  static constexpr int64_t kTensorCoreMinTokens = 32;
  // Products of one input (QKV, gate/up) share a launch on the dp4a kernels up to this many tokens:
  // every decode-shaped step below the tensor cores' threshold.
  static constexpr int64_t kGroupMaxTokens = 16;
  // Tokens per warp of the float kernels and of the dp4a ones outside the tensor-core path.
  static int warpTokens(int64_t tokens) { return tokens == 1 ? 1 : tokens <= 8 ? 4 : 16; }
  static int groupWarpTokens(int64_t tokens) { return warpTokens(tokens); }

  // Checks a product's shape and buffers; returns the alignment of the weight rows.
  int checkMatmul(const WeightRef& w, const float* x, int64_t tokens, const float* y, const float* bias) const;
  // matmul() on the decode kernels (integer or float) for these rows.
  void matmulRows(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  // The integer path: quantizes x (unless the scratch still holds it) and multiplies.
  void matmulInteger(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  // Makes the scratch hold x's integer form: nothing when it still does, else the producer that
  // just queued x writes it (fused), else quantize_x. Returns the row stride. The caller holds a
  // KeepInput on FusionState::keepQuantized.
  uint64_t quantizeInput(const float* x, int64_t tokens, int64_t cols);
  IntProduct intProduct(const WeightRef& w, int align, int64_t tokens) const;
  // The integer kernels' rows per warp for w at perWarpTokens tokens per warp (dp4a kernels).
  int intRowsPerWarp(const WeightRef& w, int perWarpTokens) const;
  // Whether these products can run as one matmul_int_group launch at `tokens` (overlaps apart,
  // which matmulsInOneLaunch checks on the buffers), and the module's parts and q4_K alignment then.
  bool groupable(std::span<const WeightRef> ws, int64_t tokens) const;
  std::vector<IntMatmulPart> groupedParts(std::span<const WeightRef> ws, int64_t tokens, int& align) const;
  // The module one product of w at `tokens` chooses (matmul, matmulInteger); nothing for a type
  // the kernels do not take.
  std::optional<ModuleSpec> productModule(const WeightRef& w, int64_t tokens) const;
  // Launches a matrix-product kernel over w's rows and `tokens`: blocks of 4 warps of rowsPerWarp
  // rows, a grid row per perWarpTokens tokens; the profile names the shape. `args`: the kernel's.
  template <typename... A>
  void launchMatmul(const char* kernel, CUfunction f, const WeightRef& w, int64_t tokens, int perWarpTokens,
                    int perWarpRows, int rowsPerWarp, const A&... args);

  const CudaContext& ctx_;
  CudaMemory& memory_;
  CudaOpQueue& queue_;
  CudaKernelSet& kernels_;
  CudaPromptPath& prompt_;
  bool integerMatmul_ = true;
  bool fuse_ = true;
  bool tensorCores_ = true;
  int tensorCoreTokens_ = kDefaultTensorCoreTokens;  // CudaSettings::tensorCoreTokens
  bool tensorCoreTokensChosen_ = false;              // ... set, so used for every product
  std::optional<int> tensorCoreRowWarps_;            // CudaSettings::tensorCoreRowWarps
  int intDecodeRows_ = 0, intPrefillRows_ = 0;       // 0: the built-in choice
  // Activations quantized for the integer products (quantize_x.cuh), grown on demand; the input
  // they hold is the queue's FusionState::quantized.
  ScratchBuffer xq_;
  uint64_t separateQuantizations_ = 0, fusedQuantizations_ = 0, groupedProducts_ = 0, tensorCoreProducts_ = 0;
};

}  // namespace jitllm::cuda
