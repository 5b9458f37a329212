#include "daemon/server/tier_goodput.h"

#include <algorithm>

namespace jitllm::server {

void TierGoodputCounter::record(ServiceTier tier, bool met, Clock::time_point at) {
  Counts& c = counts_[size_t(tier)];
  c.finished++;
  if (!met) return;
  c.met++;
  c.recentMet.push_back(at);
}

void TierGoodputCounter::expire(Clock::time_point now) {
  for (Counts& c : counts_) {
    while (!c.recentMet.empty() && now - c.recentMet.front() > kWindow) c.recentMet.pop_front();
  }
}

std::vector<TierGoodput> TierGoodputCounter::snapshot(const TierConfig& tiers, Clock::time_point now) const {
  std::vector<TierGoodput> out;
  for (ServiceTier t : kAllServiceTiers) {
    const Counts& c = counts_[size_t(t)];
    const auto recent =
        std::count_if(c.recentMet.begin(), c.recentMet.end(), [&](auto at) { return now - at <= kWindow; });
    out.push_back(
        {t, tiers.targetsOf(t), c.finished, c.met, double(recent) / std::chrono::duration<double>(kWindow).count()});
  }
  return out;
}

}  // namespace jitllm::server
