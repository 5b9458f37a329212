// Attention on one CUDA device (attention.cuh) over paged fp32/fp16 KV, and which of its kernels
// a batch takes - all give the same bits:
// - decode (few blocks): a block per query head rather than per KV head, and past splitPast_
//   positions each 64-position chunk a block of its own (attention_split), folded in order, or a
//   span of chunks a block where that still makes enough blocks (attention_spans);
// - prefill of one session (many blocks): blocks of several tokens over all query heads of a KV
//   head (attention_rows);
// - else one block per token and KV head (attention).
// The last kernel writes the output's integer form too when a product asks (FusionState::producer).
//
// Ownership: owns the split kernels' scratch (partial states, chunk counters); borrows its
// device's other parts. Thread-safety: the executor thread.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_kernel_set.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_op_queue.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/device.h"

namespace jitllm::cuda {

class CudaAttention final {
 public:
  CudaAttention(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
                const ResolvedCudaSettings& settings);

  // Device::attention.
  void attend(const float* q, float* out, const AttentionBatch& batch);
  // The modules batches of a's shape choose with up to maxTokens tokens an op.
  void wantModules(const KernelWorkload::Attention& a, int64_t maxTokens, std::vector<ModuleSpec>& out) const;

  uint64_t perHeadAttentions() const { return perHeadAttentions_; }
  uint64_t rowAttentions() const { return rowAttentions_; }

 private:
  // One copy of each distinct page table (tokens of one session share theirs), as long as the
  // longest of its tokens needs.
  struct PageTables {
    std::vector<std::pair<const uint8_t* const*, size_t>> tables;  // table, pages needed
    std::vector<int32_t> tableOf;                                  // each token's table
    std::vector<int32_t> tableStart;                               // each table's first page
    size_t totalPages = 0;
    int maxPositions = 0;  // the most positions a token of the batch attends to
    bool slid = false;     // some token's window starts past position 0
  };
  // How a batch's blocks cover it.
  struct Layout {
    bool fewBlocks = false;  // fewer than the multiprocessors at a block per token and KV head
    int blockGroup = 1;      // query heads per block
    int headBlocks = 1;      // blocks per token and chunk
    int maxChunks = 0;       // chunks of the longest context, rounded up to 8
    bool split = false;      // attention_split / attention_spans
  };
  // What every attention kernel is given, as its ABI takes it.
  struct Args {
    CUdeviceptr q = 0, out = 0, positions = 0, offsets = 0, pages = 0;
    int heads = 0, kvHeads = 0;
    float scale = 0;
    int window = 0;
    unsigned tokens = 0, gridY = 0;  // blocks: a grid row per token, headBlocks of them a chunk
  };
  using MakeLaunch = std::function<Command(CUdeviceptr xq, uint64_t stride)>;

  // Checks the batch's shape and buffers; returns the query heads per KV head.
  int check(const float* q, const float* out, const AttentionBatch& batch) const;
  PageTables pageTables(const AttentionBatch& batch) const;
  Layout layout(const AttentionBatch& batch, int group, int maxPositions) const;
  // Stages positions, each token's first page and the pages; returns the kernels' arguments.
  Args stage(const float* q, float* out, const AttentionBatch& batch, const PageTables& pages, const Layout& l);
  // Queues make(0, 0) as the op `name`, offered for fusion with the quantization of its output.
  void offer(const char* name, const float* out, const AttentionBatch& batch, const Layout& l, const MakeLaunch& make);
  void launchSplit(const float* out, const AttentionBatch& batch, const Layout& l, const Args& a);
  // attention_rows where the batch and the GPU allow; false, having queued nothing, otherwise.
  bool launchRows(const float* out, const AttentionBatch& batch, const PageTables& pages, const Layout& l,
                  const Args& a);
  // attention_rows' tokens a block (0: off).
  int rowTokens(int headDim) const;

  // attention.cuh's kChunk.
  static constexpr int kAttentionChunk = 64;

  const CudaContext& ctx_;
  CudaMemory& memory_;
  CudaOpQueue& queue_;
  CudaKernelSet& kernels_;
  // Decode attention spreads a context over blocks (attention_split / _spans) once the longest
  // has more than this many positions; 0: never (one block per token and head).
  int splitPast_ = kAttentionChunk;
  // CudaSettings::attentionRowTokens; 0: off; -1: defaultAttentionRowTokens by head dim.
  int attentionRowTokens_ = -1;
  // Off: a block serves all query heads of its KV head even when the batch has few blocks.
  bool perHead_ = true;
  // attention_spans takes a whole span a block where that still makes this many blocks (fewer
  // leave multiprocessors idle; CudaSettings::attentionSpanBlocks).
  int spanBlocks_ = 0;
  ScratchBuffer partials_;  // per-chunk attention states (attention_split)
  // attention_split's finished chunks per (token, KV head); zero between launches.
  ScratchBuffer chunkCounters_;
  uint64_t perHeadAttentions_ = 0;  // launches with a block per query head (decode)
  uint64_t rowAttentions_ = 0;      // launches with blocks of several tokens (prefill)
};

}  // namespace jitllm::cuda
