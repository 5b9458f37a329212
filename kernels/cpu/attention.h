// Attention of one query head over a session's paged KV cache (fp16 or fp32), on the CPU.
//
// Scores, softmax and the weighted sum of V are computed in float32 (the sum of exponentials in
// double), in position order, so a head's output depends only on its inputs
// and the kernel variant, never on how heads are spread over threads.
//
// Thread-safety: reentrant; each thread passes its own scratch.
#pragma once

#include <vector>

#include "kernels/cpu/gemm/isa.h"
#include "kernels/device.h"

namespace jitllm::cpu {

struct AttentionScratch {
  std::vector<float> scores;
  std::vector<float> accum;
};

// Writes out[token][head] from q[token][head] over positions [0, positions[token]].
void attendOneHead(const float* q, float* out, const AttentionBatch& batch, int64_t token, int head, Isa isa,
                   AttentionScratch& scratch);

}  // namespace jitllm::cpu
