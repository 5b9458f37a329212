// Per service tier, the replies a model finished and those that met both of the tier's targets:
// counts since the load, and the goodput - met replies per second over the last minute
// (docs/tiers.md, "Goodput").
//
// Thread-safety: none of its own; ModelHost keeps it under its mutex.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "daemon/server/service_tier.h"

namespace jitllm::server {

// One tier's replies since the model was loaded: how many ended normally, how many of those met
// both targets, and that goodput over the last minute.
struct TierGoodput {
  ServiceTier tier = ServiceTier::kStandard;
  TierTargets targets;
  uint64_t finished = 0;
  uint64_t met = 0;
  double metPerSecond = 0;
};

class TierGoodputCounter final {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kWindow{60};

  // A reply of `tier` ended normally at `at`, meeting its targets or not.
  void record(ServiceTier tier, bool met, Clock::time_point at);
  // Forgets met replies older than the window (so memory stays bounded by a minute's replies).
  void expire(Clock::time_point now);
  // Every tier, most urgent first, with its targets from `tiers`.
  std::vector<TierGoodput> snapshot(const TierConfig& tiers, Clock::time_point now) const;

 private:
  struct Counts {
    uint64_t finished = 0, met = 0;
    std::deque<Clock::time_point> recentMet;
  };
  std::array<Counts, kServiceTiers> counts_;
};

}  // namespace jitllm::server
