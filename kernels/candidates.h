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
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

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

// The requests of one Device::selectCandidates call as a GPU kernel reads them: one table of
// 32-bit words - counts[rows], the penalty lists' starts[rows + 1] (row r's penalised ids are
// [starts[r], starts[r + 1])), the penalised ids, penalties[rows] (floats) - at these byte offsets.
struct CandidateTable {
  size_t rows = 0;
  size_t penalised = 0;  // ids of the rows whose penalty is not 1
  size_t startsOffset() const { return rows * 4; }
  size_t idsOffset() const { return (2 * rows + 1) * 4; }
  size_t penaltiesOffset() const { return (2 * rows + 1 + penalised) * 4; }
  size_t bytes() const { return (3 * rows + 1 + penalised) * 4; }
};
// The table's layout for `requests`, checking each asks for 1 to min(stride, maxCount)
// candidates (Error(FAILED) naming `device` otherwise).
CandidateTable planCandidateTable(std::span<const CandidateRequest> requests, int64_t stride, int64_t maxCount,
                                  const std::string& device);
// Writes the table (table.bytes() at `out`, 4-byte aligned).
void packCandidateTable(std::span<const CandidateRequest> requests, const CandidateTable& table, void* out);

}  // namespace jitllm
