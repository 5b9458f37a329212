// "online": rebalances onto a device that has just arrived (hot-plug, a driver that came back).
//
// The first snapshot only teaches it which devices exist. When a device appears later, every
// unpinned layer that runs on a slower device (lower probe speed, or a software device when the
// new one is real) moves to it while it has room, whole runs at a time, so models get faster
// without a restart. A device that vanishes is forgotten, so its return counts as an arrival.
//
// Thread-safety: one scheduler thread.
#pragma once

#include <set>

#include "base/device_id.h"
#include "policies/policy.h"

namespace jitllm::policies {

class OnlinePolicy final : public Policy {
 public:
  explicit OnlinePolicy(PolicyConfig config) : config_(config) {}
  const char* name() const override { return "online"; }
  std::vector<Action> plan(const Snapshot& snapshot) override;

 private:
  PolicyConfig config_;
  bool seenFirst_ = false;
  std::set<DeviceId> known_;
};

}  // namespace jitllm::policies
