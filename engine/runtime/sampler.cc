#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace jitllm::runtime {

std::optional<SamplingParams::Problem> SamplingParams::firstProblem() const {
  auto problem = [](Param p, auto... parts) { return std::optional<Problem>(Problem{p, detail::concat(parts...)}); };
  if (!(std::isfinite(temperature) && temperature >= 0))
    return problem(Param::kTemperature, "temperature must be >= 0, not ", temperature);
  if (topK < 0) return problem(Param::kTopK, "top-k must be >= 0, not ", topK);
  if (!(topP > 0 && topP <= 1)) return problem(Param::kTopP, "top-p must be in (0, 1], not ", topP);
  if (!(minP >= 0 && minP < 1)) return problem(Param::kMinP, "min-p must be in [0, 1), not ", minP);
  if (!(std::isfinite(repeatPenalty) && repeatPenalty > 0))
    return problem(Param::kRepeatPenalty, "repeat penalty must be > 0, not ", repeatPenalty);
  if (repeatLastN < 0) return problem(Param::kRepeatLastN, "repeat-last-n must be >= 0, not ", repeatLastN);
  return std::nullopt;
}

void SamplingParams::validate() const {
  if (auto p = firstProblem()) JITLLM_FAIL(kFailed, p->message);
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

CandidateRequest Sampler::candidates(std::span<const int32_t> history, int64_t vocab) {
  CandidateRequest r;
  penalized_.clear();
  if (params_.repeatPenalty != 1.0f && params_.repeatLastN > 0 && !history.empty()) {
    // Each distinct recent token is penalised once, however often it appeared.
    const size_t n = std::min(history.size(), size_t(params_.repeatLastN));
    penalized_.assign(history.end() - long(n), history.end());
    std::sort(penalized_.begin(), penalized_.end());
    penalized_.erase(std::unique(penalized_.begin(), penalized_.end()), penalized_.end());
    r.repeatPenalty = params_.repeatPenalty;
    r.penalized = penalized_;
  }
  int64_t count = 1;
  if (!greedy()) count = params_.topK > 0 ? std::min<int64_t>(params_.topK, kMaxCandidates) : kMaxCandidates;
  r.count = int32_t(std::min(count, vocab));
  return r;
}

int32_t Sampler::pick(std::span<const int32_t> ids, std::span<const float> values) {
  JITLLM_REQUIRE(!ids.empty() && ids.size() == values.size(), "sampling from no candidates");
  if (greedy()) return ids[0];
  // Probabilities at temperature 1 for top-p and min-p, as llama.cpp's chain computes them.
  const float maxLogit = values[0];
  size_t keep = ids.size();
  p_.resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; i++) sum += p_[i] = std::exp(double(values[i] - maxLogit));
  if (params_.topP < 1.0f) {
    double cumulative = 0;
    size_t n = 0;
    while (n < keep) {
      cumulative += p_[n] / sum;
      n++;
      if (cumulative >= params_.topP) break;
    }
    keep = n;
  }
  if (params_.minP > 0) {
    // p_i / p_max >= minP, where p_max's unnormalised weight is 1.
    size_t n = 1;
    while (n < keep && p_[n] >= params_.minP) n++;
    keep = n;
  }
  double total = 0;
  w_.resize(keep);
  for (size_t i = 0; i < keep; i++)
    total += w_[i] = std::exp(double(values[i] - maxLogit) / double(params_.temperature));
  double r = uniform() * total;
  for (size_t i = 0; i < keep; i++) {
    r -= w_[i];
    if (r < 0) return ids[i];
  }
  return ids[keep - 1];
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  JITLLM_REQUIRE(!logits.empty(), "sampling from an empty row of logits");
  const CandidateRequest r = candidates(history, int64_t(logits.size()));
  ids_.resize(size_t(r.count));
  values_.resize(size_t(r.count));
  selectCandidates(logits.data(), int64_t(logits.size()), r, ids_.data(), values_.data());
  return pick(ids_, values_);
}

}  // namespace jitllm::runtime
