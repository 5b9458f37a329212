// Picks the next token from a row of logits.
//
// Greedy by default (temperature 0: the highest logit, ties to the lowest id, as llama.cpp's
// greedy tools do). Otherwise the llama.cpp chain, in its order: repetition penalty over the last
// `repeatLastN` tokens, top-k (at most kMaxCandidates), top-p, min-p, temperature, then a draw
// from our own seeded generator (splitmix64 and 53-bit uniforms, not <random>'s
// implementation-defined distributions), so the same seed and inputs give the same tokens on every
// machine - and, since each row is narrowed to its candidates exactly alike on every backend
// (kernels/candidates.h), whether the first half ran on a GPU or here.
//
// Thread-safety: a Sampler is used by one thread at a time (it owns its generator state).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/candidates.h"

namespace jitllm::runtime {

struct SamplingParams {
  float temperature = 0.0f;    // <= 0: greedy
  int32_t topK = 0;            // <= 0: off
  float topP = 1.0f;           // >= 1: off
  float minP = 0.0f;           // <= 0: off
  float repeatPenalty = 1.0f;  // 1: off
  int32_t repeatLastN = 64;    // tokens of history the penalty looks at
  uint64_t seed = 0;

  enum class Param { kTemperature, kTopK, kTopP, kMinP, kRepeatPenalty, kRepeatLastN };
  struct Problem {
    Param param;
    std::string message;  // names the parameter and the range it must be in
  };
  // The first parameter out of its range, if any (the daemon names it in its clients' terms).
  std::optional<Problem> firstProblem() const;
  // Error(FAILED) with firstProblem()'s message.
  void validate() const;
};

class Sampler final {
 public:
  // At most this many candidates are drawn from: a request without top-k (or with a larger one)
  // draws from the 1024 most likely tokens, which hold all but a negligible share of a trained
  // model's probability. Capping is what lets a step narrow its rows on the device and move
  // candidates instead of whole rows of logits (kernels/candidates.h).
  static constexpr int32_t kMaxCandidates = 1024;

  explicit Sampler(const SamplingParams& params);

  // Sampling in two halves, so that the first can run on the device that computed the logits:
  // what this sampler needs of a row of `vocab` logits (one candidate when greedy), given the
  // session's tokens so far (prompt and generated, oldest first). The request's `penalized` points
  // into this sampler and stays valid until the next call.
  CandidateRequest candidates(std::span<const int32_t> history, int64_t vocab);
  // The token, from the candidates selectCandidates gave for that request (best first). Draws from
  // the generator when sampling, so each row is picked once, in order.
  int32_t pick(std::span<const int32_t> ids, std::span<const float> values);
  // Both halves on the host: the same token as selecting on any device, then pick().
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }
  bool greedy() const { return params_.temperature <= 0; }

 private:
  double uniform();  // in [0, 1)

  SamplingParams params_;
  uint64_t state_;
  std::vector<int32_t> penalized_;  // the last request's distinct recent tokens
  std::vector<int32_t> ids_;        // sample()'s candidates
  std::vector<float> values_;
  std::vector<double> p_, w_;  // pick()'s working rows
};

// The index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

}  // namespace jitllm::runtime
