#include "daemon/server/serving_metrics.h"

#include <algorithm>

namespace jitllm::server {

void LatencyHistogram::observe(double seconds) {
  const auto it = std::lower_bound(kBounds.begin(), kBounds.end(), seconds);
  if (it != kBounds.end()) counts[size_t(it - kBounds.begin())]++;
  count++;
  sum += seconds;
}

void ServingMetrics::generationEnded(const std::string& model, const GenerationStats& g, bool failed) {
  std::lock_guard lock(mutex_);
  ModelServingCounters& m = models_[model];
  m.requests++;
  if (failed) m.failedRequests++;
  m.promptTokens += g.promptTokens;
  m.generatedTokens += g.generatedTokens;
  if (g.generatedTokens > 0) {
    const double ttftSeconds = g.timeToFirstTokenMs / 1000;
    m.timeToFirstToken.observe(ttftSeconds);
    if (g.generatedTokens > 1) {
      m.timePerOutputToken.observe((g.totalMs / 1000 - ttftSeconds) / double(g.generatedTokens - 1));
    }
  }
  if (!failed) {
    m.endToEnd.observe(g.totalMs / 1000);
    m.tierFinished[size_t(g.tier)]++;
    if (g.metTargets) m.tierMet[size_t(g.tier)]++;
  }
}

void ServingMetrics::migrationCommitted(const std::string& model, double pauseSeconds, bool pageOut, bool pageIn) {
  std::lock_guard lock(mutex_);
  ModelServingCounters& m = models_[model];
  m.migrations++;
  m.migrationPause.observe(pauseSeconds);
  if (pageOut) m.weightPageOuts++;
  if (pageIn) m.weightPageIns++;
}

void ServingMetrics::kvPagedOut(const std::string& model, size_t sessions) {
  std::lock_guard lock(mutex_);
  models_[model].kvPageOuts += sessions;
}

void ServingMetrics::kvPagedIn(const std::string& model) {
  std::lock_guard lock(mutex_);
  models_[model].kvPageIns++;
}

std::map<std::string, ModelServingCounters> ServingMetrics::snapshot() const {
  std::lock_guard lock(mutex_);
  return models_;
}

}  // namespace jitllm::server
