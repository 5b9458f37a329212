// Every knob of the CUDA backend in one place: the choices a caller may make (tests and tools set
// them; the daemon leaves them unset) and the diagnostics of tuning runs. A field left unset takes
// the environment variable named beside it where that is set, else the default; resolveSettings()
// is the only code that reads JITLLM_CUDA_*, and it refuses a bad value by name before a device is
// made. docs/cuda.md lists them with their defaults.
//
// Thread-safety: values and a pure function (of the environment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace jitllm::cuda {

struct CudaSettings {
  // Repeated op queues as CUDA graphs. JITLLM_CUDA_GRAPHS=0 turns them off.
  std::optional<bool> graphs;
  // q4_K / q6_K products on integer dot products (matmul_int.cuh) rather than float decoding.
  // JITLLM_CUDA_INTDOT=0 turns them off.
  std::optional<bool> integerMatmul;
  // q4_K/q6_K products of 32 tokens or more on int8 tensor cores (matmul_int.cuh's JL_MMA, sm_80 and
  // later; the same bits as the dp4a kernels). JITLLM_CUDA_MMA=0 turns it off.
  std::optional<bool> tensorCores;
  // Prompt tokens' products (the rows Device::setPromptRows names) on fp16 tensor cores
  // (gemm_f16.cuh, sm_80 and later): the weights decoded to fp16 once per product, fp32 sums. Their
  // bits depend on the token alone, not on the batch, but differ from decode's; off, prompts take
  // the decode kernels' bits. JITLLM_CUDA_PROMPT_GEMM=0 turns it off.
  std::optional<bool> promptGemm;
  // Weight rows of a gemm_f16 block (32, 64 or 128) for every prompt product; the bits do not
  // depend on it. JITLLM_CUDA_PROMPT_ROWS=N; unset: chosen per product.
  std::optional<int> promptBlockRows;
  // K per pipeline stage of gemm_f16 (32 or 64; rows whose length 64 does not divide take 32); the
  // bits do not depend on it. JITLLM_CUDA_PROMPT_SLICE=N; default 64 (pp512 +1-9 % over 32 on an
  // H200, docs/benchmarks.md).
  std::optional<int> promptSliceK;
  // Tokens a tensor-core block computes (32 or 64: 16 or 32 per warp, matmul_int.cuh) in products
  // of more than 32 tokens; the bits do not depend on it. JITLLM_CUDA_MMA_TOKENS=N; unset:
  // kDefaultTensorCoreTokens for the products whose blocks that wide still number at least the
  // multiprocessors, 32 for the others.
  std::optional<int> tensorCoreTokens;
  // Row warps of a tensor-core block (1, 2 or 4: 16 to 64 rows; 1 only with 32-token blocks); the
  // bits do not depend on it. JITLLM_CUDA_MMA_ROW_WARPS=N; unset: tensorCoreRowWarps per product
  // (the tallest tile that still gives every SM a block).
  std::optional<int> tensorCoreRowWarps;
  // Kernels launched with programmatic dependent launch (sm_90 and later, a driver with
  // cuLaunchKernelEx): each may be scheduled while the one before it runs and waits on the GPU
  // (common.cuh: awaitPreviousKernel), hiding the launch latency between a decode step's ~200
  // kernels. JITLLM_CUDA_PDL=0 turns it off.
  std::optional<bool> programmaticLaunch;
  // Ops merged into fewer launches - the residual add into the next norm, quantization into the
  // op producing the activations, matmuls() as one launch, ropeAndStore as one; the same bits
  // either way. JITLLM_CUDA_FUSE=0 turns it off.
  std::optional<bool> fuse;
  // gatherToHost / scatterFromHost as one kernel and one pipelined transfer through pinned memory
  // (blocks.cuh) rather than a copy per block. JITLLM_CUDA_GATHER=0 turns it off.
  std::optional<bool> blockKernels;
  // Decode queues handed to the GPU in parts while the host still queues the rest of the step
  // (CudaOpQueue::submitEarly). JITLLM_CUDA_EARLY_SUBMIT=0 turns it off, =N makes the first part N
  // launches (default 32); JITLLM_CUDA_EARLY_GROWTH=N makes each part at least N times the one
  // before (default 3).
  std::optional<bool> earlySubmit;
  std::optional<int> earlySubmitCommands;
  std::optional<int> earlySubmitGrowth;
  // Attention's chunks folded in spans of this many (2, 4 or 8; 0: in one level), a decode block
  // taking a whole span over long contexts (attention.cuh: JL_SPAN, attention_spans). The order of
  // the folds past one span, prefill and decode alike, so devices a model migrates between must
  // agree on it. JITLLM_CUDA_ATTENTION_SPAN=N; default kDefaultAttentionSpan (2).
  std::optional<int> attentionSpan;
  // With attentionSpan: a decode block takes a whole span where that still makes at least this many
  // blocks, else a chunk (the fold going in spans either way: the same bits). JITLLM_CUDA_SPAN_BLOCKS=N;
  // default twice the multiprocessors.
  std::optional<int> attentionSpanBlocks;
  // Prefill attention in blocks of this many tokens of one session (attention.cuh: attention_rows;
  // the same bits as a block per token), 0 to 64; 0: a block per token. JITLLM_CUDA_ATTENTION_ROWS=N;
  // default defaultAttentionRowTokens(head dim): 8, or 16 for heads of 128 columns and more. A
  // block too large for the GPU's shared memory takes a block per token.
  std::optional<int> attentionRowTokens;
  // Decode attention split over blocks past this many positions (JITLLM_CUDA_ATTENTION_SPLIT=N;
  // default one chunk, 64; 0: always).
  std::optional<int> attentionSplit;
  // Decode attention with a block per query head for few tokens (JITLLM_CUDA_ATTENTION_HEADS=0
  // turns it off).
  std::optional<bool> attentionPerHead;
  // #defines added to every kernel module, before those of JITLLM_CUDA_DEFINES ("NAME=VALUE,..."):
  // kernel variants chosen by name (attention.cuh's JL_ATTN_PREFETCH=0), for tests and tools.
  std::vector<std::pair<std::string, int64_t>> defines;

  // Diagnostics and tuning experiments (docs/cuda.md):
  // GPU time per op, printed when the device is destroyed (JITLLM_CUDA_PROFILE=1).
  std::optional<bool> profile;
  // Graph launches and the host's parts of each read-back timed (JITLLM_CUDA_GRAPH_TIMES=1).
  std::optional<bool> timeGraphs;
  // Rows per warp of the integer kernels, decode and prefill (JITLLM_CUDA_INT_DECODE_ROWS,
  // JITLLM_CUDA_INT_PREFILL_ROWS); 0: the built-in choice.
  std::optional<int> intDecodeRows;
  std::optional<int> intPrefillRows;
  // Ops whose names start with one of these are not launched (JITLLM_CUDA_SKIP="a,b"): what a
  // step costs without them. The results are then wrong.
  std::vector<std::string> skipOps;
};

// CudaSettings with every field decided.
struct ResolvedCudaSettings {
  bool graphs = true;
  bool integerMatmul = true;
  bool tensorCores = true;
  bool promptGemm = true;
  std::optional<int> promptBlockRows;  // unset: chosen per product
  int promptSliceK = 64;
  std::optional<int> tensorCoreTokens;    // unset: chosen per product
  std::optional<int> tensorCoreRowWarps;  // unset: chosen per product
  bool programmaticLaunch = true;
  bool fuse = true;
  bool blockKernels = true;
  size_t earlySubmitCommands = 32;  // 0: off
  size_t earlySubmitGrowth = 3;
  int attentionSpan = 2;
  std::optional<int> attentionSpanBlocks;  // unset: twice the multiprocessors
  int attentionRowTokens = -1;             // -1: by head dim
  int attentionSplit = 64;
  bool attentionPerHead = true;
  std::vector<std::pair<std::string, int64_t>> defines;
  bool profile = false;
  bool timeGraphs = false;
  int intDecodeRows = 0;
  int intPrefillRows = 0;
  std::vector<std::string> skipOps;
};

// `settings`' unset fields from the environment, else the defaults. Error(FAILED) naming the
// setting and its variable for a value out of range.
ResolvedCudaSettings resolveSettings(const CudaSettings& settings);

// The most tokens a block attentionRowTokens may ask for.
inline constexpr int kMaxAttentionRowTokens = 64;

}  // namespace jitllm::cuda
