#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "base/error.h"

namespace jitllm::runtime {

void SamplingParams::validate() const {
  JITLLM_REQUIRE(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0, not ", temperature);
  JITLLM_REQUIRE(topK >= 0, "top-k must be >= 0, not ", topK);
  JITLLM_REQUIRE(topP > 0 && topP <= 1, "top-p must be in (0, 1], not ", topP);
  JITLLM_REQUIRE(minP >= 0 && minP < 1, "min-p must be in [0, 1), not ", minP);
  JITLLM_REQUIRE(std::isfinite(repeatPenalty) && repeatPenalty > 0, "repeat penalty must be > 0, not ", repeatPenalty);
  JITLLM_REQUIRE(repeatLastN >= 0, "repeat-last-n must be >= 0, not ", repeatLastN);
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); i++) {
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), state_(params.seed) { params.validate(); }

double Sampler::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1p-53;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  JITLLM_REQUIRE(!logits.empty(), "sampling from an empty row of logits");
  const bool penalise = params_.repeatPenalty != 1.0f && params_.repeatLastN > 0 && !history.empty();
  if (params_.temperature <= 0 && !penalise) return argmax(logits);

  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); i++) candidates_[i] = {int32_t(i), logits[i]};
  if (penalise) {
    // Each distinct recent token is penalised once, however often it appeared.
    const size_t n = std::min(history.size(), size_t(params_.repeatLastN));
    std::unordered_set<int32_t> recent(history.end() - long(n), history.end());
    for (int32_t id : recent) {
      if (id < 0 || size_t(id) >= candidates_.size()) continue;
      float& l = candidates_[size_t(id)].logit;
      l = l > 0 ? l / params_.repeatPenalty : l * params_.repeatPenalty;
    }
  }
  if (params_.temperature <= 0) {
    int32_t best = 0;
    for (size_t i = 1; i < candidates_.size(); i++) {
      if (candidates_[i].logit > candidates_[size_t(best)].logit) best = int32_t(i);
    }
    return best;
  }

  // Sorted by logit, high first; equal logits keep id order so results never depend on sort
  // stability.
  auto byLogit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t keep = candidates_.size();
  if (params_.topK > 0 && size_t(params_.topK) < keep) {
    keep = size_t(params_.topK);
    std::partial_sort(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), byLogit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), byLogit);
  }
  candidates_.resize(keep);

  // Probabilities at temperature 1 for top-p and min-p, as llama.cpp's chain computes them.
  const float maxLogit = candidates_.front().logit;
  std::vector<double> p(candidates_.size());
  double sum = 0;
  for (size_t i = 0; i < candidates_.size(); i++) sum += p[i] = std::exp(double(candidates_[i].logit - maxLogit));
  if (params_.topP < 1.0f) {
    double cumulative = 0;
    size_t n = 0;
    while (n < candidates_.size()) {
      cumulative += p[n] / sum;
      n++;
      if (cumulative >= params_.topP) break;
    }
    candidates_.resize(n);
  }
  if (params_.minP > 0) {
    // p_i / p_max >= minP, where p_max's unnormalised weight is 1.
    size_t n = 1;
    while (n < candidates_.size() && p[n] >= params_.minP) n++;
    candidates_.resize(n);
  }

  double total = 0;
  std::vector<double> w(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); i++) {
    total += w[i] = std::exp(double(candidates_[i].logit - maxLogit) / double(params_.temperature));
  }
  double r = uniform() * total;
  for (size_t i = 0; i < candidates_.size(); i++) {
    r -= w[i];
    if (r < 0) return candidates_[i].id;
  }
  return candidates_.back().id;
}

}  // namespace jitllm::runtime
