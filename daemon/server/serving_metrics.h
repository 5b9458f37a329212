// What the daemon has served, counted for Prometheus (GET /metrics, daemon/http/metrics_page.h):
// per model, the tokens of every generation (RPC and HTTP alike), its latencies, migrations and
// their pauses, and paging of weights and KV. Gauges (requests running, KV pages, device memory)
// are read from the live objects when the page is made, not kept here.
//
// Recorded by the model workers as things happen, so a counter moves by exactly what the requests
// did: a generation counts when it ends (finished, failed or cancelled), with the prompt tokens
// its usage reports and the tokens it generated.
//
// Thread-safety: all methods may be called from any thread (one mutex; a record is a few adds).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "daemon/server/generation_stats.h"
#include "daemon/server/service_tier.h"

namespace jitllm::server {

// A Prometheus histogram: counts per upper bound (cumulative when rendered), their sum and count.
struct LatencyHistogram {
  // Seconds, from a fast token on a GPU (a millisecond) to a long reply on a CPU (minutes).
  static constexpr std::array<double, 16> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,      2.5,   5,    10,    30,   60,  300};
  std::array<uint64_t, kBounds.size()> counts{};  // observations <= kBounds[i] and > kBounds[i-1]
  uint64_t count = 0;                             // every observation (also those above the last bound)
  double sum = 0;
  void observe(double seconds);
};

struct ModelServingCounters {
  uint64_t requests = 0;  // generations that ended, however they ended
  uint64_t failedRequests = 0;
  uint64_t promptTokens = 0;
  uint64_t generatedTokens = 0;
  LatencyHistogram timeToFirstToken;
  LatencyHistogram timePerOutputToken;  // decode time over the tokens after the first
  LatencyHistogram endToEnd;
  uint64_t migrations = 0;
  LatencyHistogram migrationPause;
  uint64_t weightPageOuts = 0, weightPageIns = 0;  // the scheduler moving a model off its devices and home
  uint64_t kvPageOuts = 0, kvPageIns = 0;          // idle sessions' KV parked in host RAM and back
  // Per service tier: replies that ended normally, and those of them that met the tier's targets.
  std::array<uint64_t, kServiceTiers> tierFinished{}, tierMet{};
};

class ServingMetrics final {
 public:
  // A reply ended: `failed` (an error or a cancel), or normally with these stats.
  void generationEnded(const std::string& model, const GenerationStats& stats, bool failed);
  void migrationCommitted(const std::string& model, double pauseSeconds, bool pageOut, bool pageIn);
  void kvPagedOut(const std::string& model, size_t sessions);
  void kvPagedIn(const std::string& model);

  std::map<std::string, ModelServingCounters> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, ModelServingCounters> models_;  // kept after an unload: counters never go back
};

}  // namespace jitllm::server
