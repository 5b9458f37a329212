// The prompt path of a CUDA device's products (Device::setPromptRows): prompt rows multiplied on
// fp16 tensor cores (gemm_f16.cuh, sm_80 and later) - the weights decoded into fp16 once per
// product, the activations rounded to fp16 once per input (q, k and v share one), fp32 sums. A
// prompt token's bits depend on its own row only, not on the batch, but are not decode's.
//
// Ownership: owns the prompt rows and the fp16 scratch buffers; borrows the context, memory,
// queue and kernels of its device. Thread-safety: the executor thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/cuda_kernel_set.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_op_queue.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/device.h"
#include "kernels/prompt_rows.h"

namespace jitllm::cuda {

class CudaPromptPath final {
 public:
  CudaPromptPath(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
                 const ResolvedCudaSettings& settings);

  // Device::setPromptRows of `device`.
  void setRows(std::span<const Device::RowRange> ranges, int64_t tokens, const DeviceId& device) {
    rows_.set(ranges, tokens, device);
  }
  const PromptRows& rows() const { return rows_; }
  // Whether the path is on: the setting, an sm_80 or later GPU, and the shared memory gemm_f16's
  // blocks take.
  bool on() const { return on_; }
  // Whether gemm_f16 takes products by w: the path on, a weight type dequant_f16 decodes into
  // fp16 without loss of range (quantized or f16), whole 32-element slices.
  bool takesMatrix(const WeightRef& w) const;
  // Whether prompt rows of a product of w over `tokens` rows at x take gemm_f16: the rows set by
  // setRows for exactly this many tokens, takesMatrix(w), and a 16-byte aligned input.
  bool takesProduct(const WeightRef& w, const float* x, int64_t tokens) const {
    return rows_.in(tokens) && takesMatrix(w) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  }
  // Rows of x on gemm_f16: w decoded into fp16, x rounded (unless it still is), one product.
  void multiply(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias, int align);
  // The modules w's prompt products can choose at up to maxTokens tokens: gemm_f16 at every
  // block height a product's shape can take.
  void wantModules(const WeightRef& w, int64_t maxTokens, std::vector<ModuleSpec>& out) const;
  uint64_t products() const { return products_; }

 private:
  // The block height gemm_f16 takes for `rows` x `tokens`: the tallest whose blocks still number
  // the multiprocessors (the bits do not depend on it).
  int blockRows(int64_t rows, int64_t tokens) const;
  // The slice gemm_f16 takes for rows of `cols` elements: sliceK_ where it divides them.
  int slice(int64_t cols) const { return cols % sliceK_ == 0 ? sliceK_ : 32; }

  const CudaContext& ctx_;
  CudaMemory& memory_;
  CudaOpQueue& queue_;
  CudaKernelSet& kernels_;
  bool on_ = true;
  int blockRowsChosen_ = 0;  // CudaSettings::promptBlockRows; 0: blockRows' choice
  int sliceK_ = 64;          // CudaSettings::promptSliceK
  PromptRows rows_;
  // The decoded fp16 weights of the product being computed and the fp16 activations, grown on
  // demand; the input halfInput_ holds is the queue's FusionState::half.
  ScratchBuffer halfWeights_, halfInput_;
  uint64_t products_ = 0;  // products of prompt rows on gemm_f16
};

}  // namespace jitllm::cuda
