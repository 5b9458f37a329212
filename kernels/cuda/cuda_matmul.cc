#include "kernels/cuda/cuda_matmul.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "kernels/quantized_input.h"

namespace jitllm::cuda {

namespace {

// matmul_int.cuh's ProductParts, as its ABI lays it out.
struct ProductPartAbi {
  CUdeviceptr w = 0;
  uint64_t rowStride = 0;
  CUdeviceptr y = 0, bias = 0;
  int32_t rows = 0, blocks = 0;
};
struct ProductPartsAbi {
  std::array<ProductPartAbi, 3> part;
};
static_assert(sizeof(ProductPartsAbi) == 120 && alignof(ProductPartsAbi) == 8);

bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bBytes && y < x + aBytes;
}

// Token counts whose kernel choices stand for every count up to `maxTokens`: each count to 64
// (the per-warp and tensor-core block choices change below that), then powers of two and the most.
std::vector<int64_t> representativeTokenCounts(int64_t maxTokens) {
  std::vector<int64_t> counts;
  for (int64_t t = 1; t <= std::min<int64_t>(maxTokens, 64); t++) counts.push_back(t);
  for (int64_t t = 128; t < maxTokens; t *= 2) counts.push_back(t);
  if (maxTokens > 64) counts.push_back(maxTokens);
  return counts;
}

int rowAlignment(const WeightRef& w) { return commonAlignment(reinterpret_cast<uintptr_t>(w.data), w.rowStride); }

}  // namespace

CudaMatmul::CudaMatmul(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
                       CudaPromptPath& prompt, const ResolvedCudaSettings& settings)
    : ctx_(ctx),
      memory_(memory),
      queue_(queue),
      kernels_(kernels),
      prompt_(prompt),
      integerMatmul_(settings.integerMatmul),
      fuse_(settings.fuse),
      tensorCores_(settings.tensorCores && ctx.arch >= 80),
      tensorCoreTokens_(settings.tensorCoreTokens.value_or(kDefaultTensorCoreTokens)),
      tensorCoreTokensChosen_(settings.tensorCoreTokens.has_value()),
      tensorCoreRowWarps_(settings.tensorCoreRowWarps),
      intDecodeRows_(settings.intDecodeRows),
      intPrefillRows_(settings.intPrefillRows) {}

int CudaMatmul::checkMatmul(const WeightRef& w, const float* x, int64_t tokens, const float* y,
                            const float* bias) const {
  JITLLM_REQUIRE(cudaSupportsWeightType(w.type), ctx_.id, ": matmul: weight type ", quant::typeName(w.type),
                 " is not supported");
  const auto rowBytes = quant::rowBytes(w.type, w.cols);
  JITLLM_REQUIRE(rowBytes && w.rows < (int64_t(1) << 31) && w.cols > 0 && w.cols < (int64_t(1) << 30) &&
                     tokens < (int64_t(1) << 31) && w.rowStride >= *rowBytes,
                 ctx_.id, ": matmul: bad shape ", w.rows, " x ", w.cols, " of ", quant::typeName(w.type));
  memory_.requireOwned(w.data, w.rowStride * size_t(w.rows - 1) + *rowBytes, "weight matrix");
  memory_.requireOwned(x, size_t(tokens * w.cols) * 4, "matmul input");
  memory_.requireOwned(y, size_t(tokens * w.rows) * 4, "matmul output");
  if (bias) memory_.requireOwned(bias, size_t(w.rows) * 4, "bias");
  const int align = rowAlignment(w);
  JITLLM_REQUIRE(align >= 2, ctx_.id, ": weight rows must be 2-byte aligned");
  return align;
}

void CudaMatmul::matmul(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias) {
  queue_.setOpTokens(tokens);
  if (tokens == 0 || w.rows == 0) return;
  const int align = checkMatmul(w, x, tokens, y, bias);
  ctx_.makeCurrent();
  if (!prompt_.takesProduct(w, x, tokens)) {
    matmulRows(w, x, tokens, y, bias, align);
    return;
  }
  // Runs of rows in order: decode rows before a prompt range, the range, ...; each run's rows are
  // contiguous in x and y.
  const int64_t K = w.cols, N = w.rows;
  prompt_.rows().forEachRun(tokens, [&](int64_t begin, int64_t end, bool prompt) {
    if (prompt) {
      prompt_.multiply(w, x + begin * K, end - begin, y + begin * N, bias, align);
    } else {
      matmulRows(w, x + begin * K, end - begin, y + begin * N, bias, align);
    }
  });
}

void CudaMatmul::matmulRows(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                            int align) {
  if (integerMatmul_ && cudaIntegerMatmulType(w.type, w.cols)) {
    matmulInteger(w, x, tokens, y, bias, align);
    return;
  }
  const bool xvec = w.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  // Tokens per warp: enough to reuse each decoded weight, few enough to keep a prefill's grid
  // wide. Rows per warp (1, 2 or 4) as matmul.cuh's JL_VARIANT says.
  const int perWarpTokens = warpTokens(tokens);
  const int perWarpRows = perWarpTokens == 16 ? 4 : perWarpTokens == 4 ? 2 : 1;
  CUfunction f = kernels_.matmul(w.type, w.cols, align, xvec, perWarpTokens);
  CUdeviceptr wp = dptr(w.data), xp = dptr(x), yp = dptr(y), bp = dptr(bias);
  uint64_t stride = w.rowStride;
  int rows = int(w.rows), t = int(tokens);
  launchMatmul("matmul", f, w, tokens, perWarpTokens, perWarpRows, perWarpRows, wp, stride, rows, xp, t, yp, bp);
}

bool CudaMatmul::matmulsInOneLaunch(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) {
  for (const MatmulTarget& t : targets) {
    // Prompt rows among them: each product alone, its prompt rows on gemm_f16.
    if (prompt_.takesProduct(t.w, x, tokens)) return false;
  }
  // The launches, not the bytes, are what a decode step's small products cost.
  std::array<WeightRef, 3> weights;
  for (size_t i = 0; i < targets.size() && i < weights.size(); i++) weights[i] = targets[i].w;
  const std::span<const WeightRef> ws(weights.data(), std::min(targets.size(), weights.size()));
  bool grouped = targets.size() <= weights.size() && groupable(ws, tokens);
  for (size_t i = 0; grouped && i < targets.size(); i++) {
    const MatmulTarget& t = targets[i];
    grouped = !overlaps(t.y, size_t(tokens * t.w.rows) * 4, x, size_t(tokens * t.w.cols) * 4);
    for (size_t j = 0; grouped && j < i; j++) {
      grouped = !overlaps(t.y, size_t(tokens * t.w.rows) * 4, targets[j].y, size_t(tokens * targets[j].w.rows) * 4);
    }
  }
  if (!grouped) return false;
  const int64_t cols = targets[0].w.cols;
  const int perWarpTokens = groupWarpTokens(tokens);
  for (const MatmulTarget& t : targets) checkMatmul(t.w, x, tokens, t.y, t.bias);
  int align = 16;
  const std::vector<IntMatmulPart> parts = groupedParts(ws, tokens, align);
  ProductPartsAbi abi;
  unsigned blocks = 0;
  std::string shape;
  for (size_t i = 0; i < targets.size(); i++) {
    const MatmulTarget& t = targets[i];
    const int rows = parts[i].rows;
    const int64_t rowsPerBlock = 4 * int64_t(intMatmulRowsPerWarp(t.w.type, cols, rows));
    abi.part[i] = {dptr(t.w.data), t.w.rowStride,     dptr(t.y),
                   dptr(t.bias),   int32_t(t.w.rows), int32_t((t.w.rows + rowsPerBlock - 1) / rowsPerBlock)};
    blocks += unsigned(abi.part[i].blocks);
    if (queue_.named())
      shape += std::string(i ? " + " : "") + std::string(quant::typeName(t.w.type)) + " " + std::to_string(t.w.rows) +
               "x" + std::to_string(cols) + " r" + std::to_string(rows);
  }
  ctx_.makeCurrent();
  const CUfunction f = kernels_.intMatmulGroup(parts, cols, align, perWarpTokens);
  const KeepInput keep(queue_.fusion().keepQuantized);
  uint64_t xqStride = quantizeInput(x, tokens, cols);
  CUdeviceptr xqPtr = xq_.ptr();
  int t = int(tokens);
  const std::string op =
      queue_.named() ? "matmul_int_group t" + std::to_string(perWarpTokens) + " " + shape : "matmul_int_group";
  groupedProducts_++;
  queue_.launch(op.c_str(), f, blocks, unsigned((tokens + perWarpTokens - 1) / perWarpTokens), 128, 0, abi, xqPtr,
                xqStride, t);
  queue_.submitEarly();
  return true;
}

int CudaMatmul::intRowsPerWarp(const WeightRef& w, int perWarpTokens) const {
  // Decode: two rows per warp on tall matrices (each lane's activations serve both), one on the
  // rest so the grid still covers the GPU. Prefill: 4 or 16 tokens by 4 rows per warp reuse each
  // weight and each activation load (2 rows: pp512 6200 tok/s on the 1B shape, 4: 9200; H200).
  if (perWarpTokens == 1) return intDecodeRows_ > 0 ? intDecodeRows_ : w.rows < 4096 ? 1 : 2;
  return intPrefillRows_ > 0 ? intPrefillRows_ : 4;
}

CudaMatmul::IntProduct CudaMatmul::intProduct(const WeightRef& w, int align, int64_t tokens) const {
  // q4_K and q6_K products of kTensorCoreMinTokens tokens or more: on tensor cores, blocks of 64 rows x 32 (or
  // tensorCoreTokens_) tokens staged in shared memory - the same bits. q4_K rows are staged by
  // 16-byte copies, so they must be 16-byte aligned (GGUF's are); q6_K's 2-byte aligned blocks by
  // 4-byte words. The q6_K kernel addresses the activations by 32-bit offsets.
  const uint64_t xqStride = uint64_t(quantizedRowBytes(w.cols));
  const bool mma = tensorCores_ && tokens >= kTensorCoreMinTokens && uint64_t(tokens) * xqStride <= UINT32_MAX &&
                   ((w.type == quant::TensorType::kQ4_K && align >= 16) || w.type == quant::TensorType::kQ6_K);
  if (mma) {
    const int blockTokens =
        tensorCoreBlockTokens(w.rows, tokens, tensorCoreTokens_, tensorCoreTokensChosen_, ctx_.multiprocessors);
    // A chosen row-warp count of 1 with 64-token blocks (the width chosen per product) takes 2.
    const int rowWarps = tensorCoreRowWarps_ ? std::max(*tensorCoreRowWarps_, blockTokens == 64 ? 2 : 1)
                                             : tensorCoreRowWarps(w.rows, tokens, blockTokens, ctx_.multiprocessors);
    return {true, blockTokens / 2, 16, rowWarps};
  }
  const int perWarpTokens = warpTokens(tokens);
  return {false, perWarpTokens, intRowsPerWarp(w, perWarpTokens)};
}

bool CudaMatmul::groupable(std::span<const WeightRef> ws, int64_t tokens) const {
  // One launch when every product runs on the dp4a kernels (integer types, one row length) in
  // decode shapes - the launches, not the bytes, are what a decode step's small products cost.
  if (!integerMatmul_ || !fuse_ || ws.size() < 2 || ws.size() > 3 || tokens <= 0 || tokens > kGroupMaxTokens)
    return false;
  for (const WeightRef& w : ws) {
    if (w.rows <= 0 || w.cols != ws[0].cols || !cudaIntegerMatmulType(w.type, w.cols)) return false;
  }
  return true;
}

std::vector<IntMatmulPart> CudaMatmul::groupedParts(std::span<const WeightRef> ws, int64_t tokens, int& align) const {
  align = 16;  // the q4_K parts' (q6_K rows are read at any 2-byte alignment)
  std::vector<IntMatmulPart> parts;
  for (const WeightRef& w : ws) {
    if (w.type == quant::TensorType::kQ4_K) align = std::min(align, rowAlignment(w));
    parts.push_back({w.type, intRowsPerWarp(w, groupWarpTokens(tokens))});
  }
  return parts;
}

template <typename... A>
void CudaMatmul::launchMatmul(const char* kernel, CUfunction f, const WeightRef& w, int64_t tokens, int perWarpTokens,
                              int perWarpRows, int rowsPerWarp, const A&... args) {
  const int64_t rowsPerBlock = 4 * int64_t(rowsPerWarp);  // 4 warps of 128 threads
  const int64_t gridY = (tokens + perWarpTokens - 1) / perWarpTokens;
  JITLLM_REQUIRE(gridY < 65536, ctx_.id, ": matmul: ", tokens, " tokens in one call are too many");
  char op[64];
  std::snprintf(op, sizeof op, "%s", kernel);
  if (queue_.named())
    std::snprintf(op, sizeof op, "%s %s %lldx%lld t%d r%d", kernel, std::string(quant::typeName(w.type)).c_str(),
                  (long long)w.rows, (long long)w.cols, perWarpTokens, perWarpRows);
  queue_.launch(op, f, unsigned((w.rows + rowsPerBlock - 1) / rowsPerBlock), unsigned(gridY), 128, 0, args...);
}

uint64_t CudaMatmul::quantizeInput(const float* x, int64_t tokens, int64_t cols) {
  FusionState& held = queue_.fusion();
  const size_t rowBytes = size_t(quantizedRowBytes(cols));
  if (memory_.grow(xq_, rowBytes * size_t(tokens), "quantized activations")) held.quantized = {};
  if (held.quantized.holds(x, tokens, cols)) return rowBytes;
  // The op that just produced x writes its integer form too, if it can; else quantize_x does.
  const FusableProducer& producer = held.producer;
  std::optional<Command> fused;
  if (producer.fused && producer.out == x && producer.elements == tokens * cols) {
    fused = producer.fused(xq_.ptr(), rowBytes, int(cols));
  }
  if (fused && queue_.replaceIfLastQueued(producer.index, producer.command, *fused)) {
    fusedQuantizations_++;
  } else {
    const CUfunction f = kernels_.quantizeX();
    CUdeviceptr xp = dptr(x), xqPtr = xq_.ptr();
    int k = int(cols);
    uint64_t stride = rowBytes;
    queue_.launch("quantize_x", f, unsigned((cols + 255) / 256), unsigned(tokens), 256, 0, xp, k, xqPtr, stride);
    separateQuantizations_++;
  }
  held.quantized = {x, tokens, cols};
  return rowBytes;
}

void CudaMatmul::matmulInteger(const WeightRef& w, const float* x, int64_t tokens, float* y, const float* bias,
                               int align) {
  FusionState& held = queue_.fusion();
  const KeepInput keep(held.keepQuantized);
  uint64_t xqStride = quantizeInput(x, tokens, w.cols);
  CUdeviceptr xqPtr = xq_.ptr();
  const IntProduct choice = intProduct(w, align, tokens);
  CUdeviceptr wp = dptr(w.data), yp = dptr(y), bp = dptr(bias);
  uint64_t stride = w.rowStride;
  int rows = int(w.rows), t = int(tokens);
  if (choice.mma) {
    const int blockTokens = 2 * choice.tokens, blockRows = 16 * choice.rowWarps;
    CUfunction f = kernels_.intMatmul(w.type, w.cols, align, choice.tokens, 16, true, choice.rowWarps);
    char op[64] = "matmul_mma";
    if (queue_.profiling())
      std::snprintf(op, sizeof op, "matmul_mma %s %lldx%lld w%d", std::string(quant::typeName(w.type)).c_str(),
                    (long long)w.rows, (long long)w.cols, choice.rowWarps);
    queue_.launch(op, f, unsigned((w.rows + blockRows - 1) / blockRows),
                  unsigned((tokens + blockTokens - 1) / blockTokens), unsigned(64 * choice.rowWarps), 0, wp, stride,
                  rows, xqPtr, xqStride, t, yp, bp);
    tensorCoreProducts_++;
  } else {
    const int perWarpTokens = choice.tokens;
    const int perWarpRows = choice.rows;
    CUfunction f = kernels_.intMatmul(w.type, w.cols, align, perWarpTokens, perWarpRows, false);
    launchMatmul("matmul_int", f, w, tokens, perWarpTokens, perWarpRows,
                 intMatmulRowsPerWarp(w.type, w.cols, perWarpRows), wp, stride, rows, xqPtr, xqStride, t, yp, bp);
  }
  // A product whose output overwrites its own input leaves the scratch describing bytes that changed.
  held.quantized.forgetIfWritten(y, size_t(tokens * w.rows) * sizeof(float));
}

// ---- made ahead ----

std::optional<ModuleSpec> CudaMatmul::productModule(const WeightRef& w, int64_t tokens) const {
  if (!cudaSupportsWeightType(w.type) || w.rows <= 0) return std::nullopt;
  const int align = rowAlignment(w);
  if (integerMatmul_ && cudaIntegerMatmulType(w.type, w.cols)) {
    const IntProduct c = intProduct(w, align, tokens);
    return intMatmulModule(w.type, w.cols, align, c.tokens, c.rows, c.mma, c.rowWarps);
  }
  return matmulModule(w.type, w.cols, align, w.cols % 4 == 0, warpTokens(tokens));
}

void CudaMatmul::wantModules(std::span<const WeightRef> ws, int64_t maxTokens, std::vector<ModuleSpec>& out) const {
  // The same choices the products make (matmul, matmulsInOneLaunch, matmulInteger).
  for (int64_t t : representativeTokenCounts(std::max<int64_t>(1, maxTokens))) {
    if (groupable(ws, t)) {
      int a = 16;
      const auto parts = groupedParts(ws, t, a);
      out.push_back(intMatmulGroupModule(parts, ws[0].cols, a, groupWarpTokens(t)));
      // A step with prompt rows runs them one by one (matmuls), its decode rows on these.
      if (!prompt_.on()) continue;
    }
    for (const WeightRef& w : ws) {
      if (auto spec = productModule(w, t)) out.push_back(std::move(*spec));
    }
  }
  // Prompt rows (setPromptRows): gemm_f16 at every block height a product's shape can choose.
  for (const WeightRef& w : ws) prompt_.wantModules(w, maxTokens, out);
}

}  // namespace jitllm::cuda
