// The first half of picking a token: a row of logits narrowed to its most likely candidates, as
// the sampler (engine/runtime/sampler.h) asks for them - after the repetition penalty, the best
// `count` by logit. A step's rows are narrowed on the device that computed them
// (Device::selectCandidates), so only the candidates cross to the host, never the full rows; the
// sampler then finishes on the host. The host function here defines the result exactly, and
// every backend's selection gives the same ids and values, bit for bit.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

namespace jitllm {

struct CandidateRequest {
  int32_t count = 1;                   // how many candidates (1: the argmax)
  float repeatPenalty = 1.0f;          // applied to the logits of `penalized` first (1: none)
  std::span<const int32_t> penalized;  // distinct token ids, host memory
};

// The order of candidates: the higher logit first (-0 and +0 equal), then the lower id; NaN after
// every number.
inline bool candidateBefore(float a, int32_t ia, float b, int32_t ib) {
  const bool nanA = std::isnan(a), nanB = std::isnan(b);
  if (nanA != nanB) return nanB;
  if (!nanA && a != b) return a > b;
  return ia < ib;
}

// A logit after the repetition penalty (llama.cpp's rule: positive ones divided, others multiplied).
inline float penalize(float logit, float penalty) { return logit > 0 ? logit / penalty : logit * penalty; }

// Writes the best min(request.count, vocab) candidates of `row` (vocab logits) after the penalty,
// in candidateBefore order, to ids and values.
void selectCandidates(const float* row, int64_t vocab, const CandidateRequest& request, int32_t* ids, float* values);

}  // namespace jitllm
