// Picks the next token from a row of logits.
//
// Greedy by default (temperature 0: the highest logit, ties to the lowest id, as llama.cpp's
// greedy tools do). Otherwise the llama.cpp chain, in its order: repetition penalty over the last
// `repeatLastN` tokens, top-k, top-p, min-p, temperature, then a draw from our own seeded
// generator (splitmix64 and 53-bit uniforms, not <random>'s implementation-defined
// distributions), so the same seed and inputs give the same tokens on every machine.
//
// Thread-safety: a Sampler is used by one thread at a time (it owns its generator state).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace jitllm::runtime {

struct SamplingParams {
  float temperature = 0.0f;    // <= 0: greedy
  int32_t topK = 0;            // <= 0: off
  float topP = 1.0f;           // >= 1: off
  float minP = 0.0f;           // <= 0: off
  float repeatPenalty = 1.0f;  // 1: off
  int32_t repeatLastN = 64;    // tokens of history the penalty looks at
  uint64_t seed = 0;

  // Error(FAILED) naming the parameter when a value is out of range.
  void validate() const;
};

class Sampler final {
 public:
  explicit Sampler(const SamplingParams& params);

  // `history` is the session's tokens so far (prompt and generated), oldest first.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  double uniform();  // in [0, 1)

  SamplingParams params_;
  uint64_t state_;
  struct Candidate {
    int32_t id;
    float logit;
  };
  std::vector<Candidate> candidates_;  // reused between calls
};

// The index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

}  // namespace jitllm::runtime
