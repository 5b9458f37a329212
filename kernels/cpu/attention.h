// Attention of query heads over a session's paged KV cache (fp16 or fp32), on the CPU.
//
// Scores, softmax and the weighted sum of V are computed in float32 (the sum of exponentials in
// double), in position order, so a head's output depends only on its inputs
// and the kernel variant, never on how heads are spread over threads or which heads share a call.
//
// Thread-safety: reentrant; each thread passes its own scratch.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm/isa.h"
#include "kernels/device.h"

namespace jitllm::cpu {

struct AttentionScratch {
  std::vector<float> scores;
  std::vector<float> accum;
  // The window's K rows, then its V rows (of the KV cache's precision).
  std::vector<const float*> rowsF32;
  std::vector<const uint16_t*> rowsF16;
};

// The most heads attendHeads takes at once.
constexpr int kMaxHeadsAtOnce = 4;

// Writes out[token][h] from q[token][h] over positions [0, positions[token]] (or the window's),
// for the heads h in [head, head + count), which must share one KV head (count <= kMaxHeadsAtOnce).
// Heads of one KV head share each K and V row's load, and their independent sums keep the vector
// units busy where one head's wait on their latency; each head's bits are those it gets alone.
void attendHeads(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, int count, Isa isa,
                 AttentionScratch& scratch);

}  // namespace jitllm::cpu
