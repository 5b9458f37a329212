#include "kernels/cuda/cuda_prompt_path.h"

#include <cstdio>
#include <set>
#include <string>

namespace jitllm::cuda {

CudaPromptPath::CudaPromptPath(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
                               const ResolvedCudaSettings& settings)
    : ctx_(ctx),
      memory_(memory),
      queue_(queue),
      kernels_(kernels),
      on_(settings.promptGemm && ctx.arch >= 80),
      blockRowsChosen_(settings.promptBlockRows.value_or(0)),
      sliceK_(settings.promptSliceK) {
  // gemm_f16's tallest block at 64 columns a stage takes 96 KiB (every sm_80+ GPU allows 99 or
  // more); where it would not fit, 32 columns, else no prompt path.
  if (size_t(ctx.maxSharedOptIn) < promptGemmSharedBytes(128, sliceK_)) sliceK_ = 32;
  if (size_t(ctx.maxSharedOptIn) < promptGemmSharedBytes(128, 32)) on_ = false;
}

bool CudaPromptPath::takesMatrix(const WeightRef& w) const {
  // Quantized types and f16 (which fp16 holds exactly); f32 and bf16 would lose range or bits.
  const bool halfExact = w.type == quant::TensorType::kF16 || quant::typeTraits(w.type).blockElems > 1;
  return on_ && cudaSupportsWeightType(w.type) && halfExact && w.rows > 0 && w.cols % 32 == 0;
}

int CudaPromptPath::blockRows(int64_t rows, int64_t tokens) const {
  if (blockRowsChosen_) return blockRowsChosen_;
  // Taller blocks do more mma per shared-memory load (a warp's tile is 32 rows x 64 tokens at 128,
  // x 16 at 32), but need many blocks to keep every SM busy: measured on an H200 (docs/cuda.md),
  // 128 rows won only where its blocks made about two for each multiprocessor (8192 x 2048 over
  // 512 tokens: 256 blocks, 74 us against 109 at 32 rows); with one or fewer (2048 and 3072 rows)
  // 32 rows won by 12-30 %, and 64 rows never won.
  const int64_t tokenBlocks = (tokens + 127) / 128;
  return (rows + 127) / 128 * tokenBlocks * 2 >= 3 * int64_t(ctx_.multiprocessors) ? 128 : 32;
}

void CudaPromptPath::multiply(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                              int align) {
  const int64_t K = w.cols, N = w.rows;
  const int height = blockRows(N, tokens);
  const CudaKernelSet::PromptGemm& k = kernels_.promptGemm(w.type, K, align, height, slice(K));
  FusionState& held = queue_.fusion();
  const KeepInput keep(held.keepHalf);
  memory_.grow(halfWeights_, size_t(N * K) * 2, "fp16 weights");
  if (memory_.grow(halfInput_, size_t(tokens * K) * 2, "fp16 activations")) held.half = {};
  CUdeviceptr wp = dptr(w.data), wh = halfWeights_.ptr(), xp = dptr(x), xh = halfInput_.ptr(), yp = dptr(y),
              bp = dptr(bias);
  uint64_t stride = w.rowStride;
  int rows = int(N), t = int(tokens);
  char op[64] = "matmul_prompt";
  if (queue_.named())
    std::snprintf(op, sizeof op, "matmul_prompt %s %lldx%lld b%d", std::string(quant::typeName(w.type)).c_str(),
                  (long long)N, (long long)K, height);
  queue_.launch("dequant_f16", k.dequant, unsigned(N), unsigned((K + 2047) / 2048), 256, 0, wp, stride, wh);
  if (!held.half.holds(x, tokens, K)) {
    queue_.launch("to_f16", k.toHalf, unsigned(tokens), unsigned((K + 1023) / 1024), 256, 0, xp, xh);
    held.half = {x, tokens, K};
  }
  queue_.launch(op, k.gemm, unsigned((N + height - 1) / height), unsigned((tokens + 127) / 128), 256,
                unsigned(promptGemmSharedBytes(height, slice(K))), wh, rows, xh, t, yp, bp);
  products_++;
  // A product whose output overwrites its own input leaves halfInput_ describing bytes that changed.
  held.half.forgetIfWritten(y, size_t(tokens * N) * sizeof(float));
}

void CudaPromptPath::wantModules(const WeightRef& w, int64_t maxTokens, std::vector<ModuleSpec>& out) const {
  if (!takesMatrix(w)) return;
  const int align = commonAlignment(reinterpret_cast<uintptr_t>(w.data), w.rowStride);
  std::set<int> heights;  // the choice changes with the tiles of 128 tokens only
  for (int64_t t = 128; t < maxTokens + 128; t += 128) heights.insert(blockRows(w.rows, t));
  for (int h : heights) out.push_back(promptGemmModule(w.type, w.cols, align, h, slice(w.cols)));
}

}  // namespace jitllm::cuda
