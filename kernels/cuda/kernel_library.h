// The CUDA kernels as run-time compiled modules: which source and #defines make each variant
// (specialised for the model's shapes and weight types), NVRTC compiling a variant for an exact
// architecture, and the on-disk cache of the results.
//
// Sources live in kernels/cuda/kernels/*.cuh and are compiled into the binary
// (embed_kernels.cmake), so a binary always carries the exact text its cache keys hash.
//
// TODO(cleanup): attention.cuh (1,006 lines) and matmul_int.cuh (854) are over the 800-line limit
// of issue 50. Splitting them changes the text every module's cache key hashes, and the check of
// bits and speed on the GPU rests on unchanged kernel sources, so it waits for a change of its own
// that is measured there.
//
// Cache: $JITLLM_CACHE_DIR if set (set but empty: no disk cache), else $XDG_CACHE_HOME/jitllm,
// else ~/.cache/jitllm; under it cuda/<key>.cubin, where the 128-bit key hashes everything that
// changes the binary: the full source with its #defines, the NVRTC options, the architecture and
// the NVRTC and driver versions. Each file records its size and a checksum, so a torn or foreign
// file is recompiled, never loaded; writes go to a temporary file renamed into place.
//
// Thread-safety: free functions are safe from any thread (NVRTC programs are per call);
// KernelCache's methods are const and safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/quant/tensor_type.h"

namespace jitllm::cuda {

struct ModuleSpec {
  std::string file;  // "matmul.cuh", "attention.cuh", "elementwise.cuh"
  std::vector<std::pair<std::string, int64_t>> defines;

  std::string key() const;     // "matmul.cuh JL_WTYPE=12 JL_K=2048 ...": names the variant
  std::string source() const;  // the #defines, then common.cuh (+ weights.cuh) and the file
};

// The weight types the CUDA kernels multiply with.
bool cudaSupportsWeightType(quant::TensorType type);

// One kernel of matmul.cuh for one weight type and row length: variant 0 is get_rows, 1, 4 and
// 16 the matrix product with that many tokens per warp. `align`: the largest power of two (2..16)
// dividing every row's address; xvec: rows of x are float4-aligned (k % 4 == 0).
inline constexpr int kMatmulVariants[] = {0, 1, 4, 16};
ModuleSpec matmulModule(quant::TensorType type, int64_t k, int align, bool xvec, int variant);
// The integer kernels of matmul_int.cuh (q4_K, q6_K; rows of whole 256-element blocks): `tokens`
// per warp (1, 4 or 16) and `rows` per warp, against activations quantized (quantize_x.cuh, in
// the elementwise module) into rows of quantizedRowBytes(k) bytes (kernels/quantized_input.h).
bool cudaIntegerMatmulType(quant::TensorType type, int64_t k);
inline constexpr int kIntMatmulVariants[][2] = {{1, 1}, {1, 2}, {4, 4}, {16, 4}};  // {tokens, rows}
// mma: the tensor-core prefill kernel instead (q4_K with 16-byte aligned rows, or q6_K; 16 or 32
// tokens x 16 rows per warp in blocks of 64 rows x twice the tokens, sm_80 and later), which gives
// the same bits.
ModuleSpec intMatmulModule(quant::TensorType type, int64_t k, int align, int tokens, int rows, bool mma = false,
                           int rowWarps = 4);
// The row warps of a tensor-core block (JL_MMA_ROW_WARPS) for a product of `rows` over `tokens` in
// blocks of `blockTokens`: the tallest tile (4 warps, 64 rows) that still gives every SM a block,
// else the smallest - a decode batch of 32 tokens over 2048 rows would leave 100 of 132 SMs idle.
int tensorCoreRowWarps(int64_t rows, int64_t tokens, int blockTokens, int multiprocessors);
// Tokens a CudaDevice's tensor-core blocks take in products of more than 32 tokens, where that
// still makes a block for every multiprocessor, unless told otherwise
// (CudaDeviceOptions::tensorCoreTokens; 64 against 32 on an H200: pp512 +13 % on the 1B shape).
constexpr int kDefaultTensorCoreTokens = 64;
// Tokens a tensor-core block of a `rows` x `tokens` product takes: `width` (32 or 64) for more than
// 32 tokens where its blocks that wide still number at least `multiprocessors` - or always, when
// the width was asked for (`widthChosen`) - else 32. The wider blocks cost less per (row, token)
// but make half the blocks: on an H200 a 512 x 2048 product of 512 tokens took 36 us at 64 tokens
// a block and 28 at 32, a 2048 x 2048 one 54 against 70.
int tensorCoreBlockTokens(int64_t rows, int64_t tokens, int width, bool widthChosen, int multiprocessors);
// The grouped form of those kernels (matmul_int_group): the products of one input by 2 or 3
// matrices in one launch, each part of its own type at its own rows per warp; `align` holds for
// every q4_K part's rows.
struct IntMatmulPart {
  quant::TensorType type;
  int rows;  // per warp, as intMatmulModule's
};
ModuleSpec intMatmulGroupModule(const std::vector<IntMatmulPart>& parts, int64_t k, int align, int tokens);
// Rows one warp of intMatmulModule(type, k, ..., rows) computes: `rows`, twice when a row takes
// half a warp (matmul_int.cuh: kSlots).
int intMatmulRowsPerWarp(quant::TensorType type, int64_t k, int rows);
// The prompt path's kernels (gemm_f16.cuh: dequant_f16, to_f16, gemm_f16) for a weight type
// dequant_f16 decodes (quantized or f16), a row length of whole slices, the rows' alignment,
// gemm_f16's block height (32, 64 or 128 weight rows; 128 tokens) and K per stage (32 or 64, which
// must divide k).
ModuleSpec promptGemmModule(quant::TensorType type, int64_t k, int align, int blockRows, int sliceK = 32);
// gemm_f16's dynamic shared memory (gemm_f16.cuh: kStages * kStageBytes): 4 stages of 32-element
// slices, or 3 of 64.
constexpr size_t promptGemmSharedBytes(int blockRows, int sliceK = 32) {
  return size_t(sliceK == 64 ? 3 : 4) * size_t(blockRows + 128) * size_t(sliceK) * 2;
}
// Prefill attention's tokens per block (attention.cuh: attention_rows, JL_QTOKENS' default).
constexpr int kDefaultAttentionRowTokens = 8;
// The tokens per block a CudaDevice gives attention_rows unless told otherwise: 8 for head dims up
// to 64, 16 above (measured on an H200, docs/cuda.md: the 3B shape's 128-column heads 266 -> 197 us
// a layer at 16, the 1B's 64 no better).
int defaultAttentionRowTokens(int headDim);
// Whether attention_rows exists for a head dim (its threads split evenly over the columns in fours).
bool attentionRowsSupported(int headDim);
// The threads of a block of attention, attention_split and attention_spans (attention.cuh's
// kThreads): 128, or the head width when it is wider.
constexpr unsigned attentionThreads(int headDim) { return headDim > 128 ? unsigned(headDim) : 128u; }
// attention_rows' threads a block (attention.cuh: kRowThreads).
constexpr int kAttentionRowThreads = 256;
// The dynamic shared memory attention_rows takes at `qTokens` tokens a block of `group` query heads
// each (attention.cuh: kRowsSharedFloats * 4).
size_t attentionRowsSharedBytes(int headDim, int group, int qTokens);
// span > 0: chunks folded in spans of `span` (attention.cuh: JL_SPAN), which adds the
// attention_spans kernel; 0: the one-level fold.
// qTokens: attention_rows' tokens per block when not kDefaultAttentionRowTokens (a define then).
ModuleSpec attentionModule(int headDim, int group, int pageTokens, bool kvF16, int span,
                           int qTokens = kDefaultAttentionRowTokens);
// The span a CudaDevice folds attention's chunks in unless told otherwise (2, 4 and 8 measured on
// an H200 in docs/cuda.md: 2 won at depths 1024-4096 on both Llama-3.2 shapes).
constexpr int kDefaultAttentionSpan = 2;
ModuleSpec elementwiseModule();
// gather_blocks and scatter_blocks: scattered blocks to and from one contiguous buffer.
ModuleSpec blocksModule();
// select_candidates: sampling's first half on the GPU (kernels/candidates.h).
ModuleSpec samplingModule();

// Every kernel variant with representative shapes: each weight type's four matmul.cuh kernels
// at a real model's row length, its decode kernel again on padded rows of an odd length, the
// integer kernels, and attention at the head dims and groups of the supported models. What CI
// compiles.
std::vector<ModuleSpec> representativeModules();

struct CompiledModule {
  std::vector<char> image;  // a cubin, or PTX text (null-terminated) for an arch NVRTC lacks
  bool cubin = true;
  std::string log;
};

// NVRTC's version as 1000 * major + 10 * minor, and the sm_XX numbers it can emit code for.
int nvrtcVersionNumber();
std::vector<int> nvrtcArchitectures();
// NVRTC's options for sm_<arch> (the disk cache's key includes them). With JITLLM_CUDA_SOURCE_DIR
// set (profiling runs), line info too.
std::vector<std::string> compileOptions(int arch);
// Compiles for sm_<arch> (e.g. 90), or for the newest virtual architecture below it as PTX when
// this NVRTC cannot emit code for that GPU. Throws Error(FAILED) with NVRTC's log on failure.
// With JITLLM_CUDA_SOURCE_DIR=DIR the module's whole source is first written to DIR (named
// after its file and a hash of the source) and the line info names that file, so Nsight Compute
// can put its stall samples against source lines. Modules found in the disk cache are not
// compiled, so not written: profile with an empty JITLLM_CACHE_DIR.
CompiledModule compileModule(const ModuleSpec& spec, int arch);

class KernelCache final {
 public:
  static std::string defaultRoot();
  explicit KernelCache(const std::string& root);  // empty root: a cache that stores nothing

  bool enabled() const { return !directory_.empty(); }
  const std::string& directory() const { return directory_; }
  std::optional<std::vector<char>> load(const std::string& keyMaterial) const;
  void store(const std::string& keyMaterial, const std::vector<char>& image) const;

 private:
  std::string pathFor(const std::string& keyMaterial) const;
  std::string directory_;
};

}  // namespace jitllm::cuda
