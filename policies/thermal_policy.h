// "thermal": moves layers off a device that runs hot and back once it has cooled.
//
// A device turns hot when its temperature passes config.hotC; its unpinned layers then move to
// the best other device that is not hot and has room. It turns cool again only after staying
// below config.coolC for config.coolForMs; the layers it lost then come back (where they are
// still where this policy put them). Between the two thresholds nothing moves, and a dip below
// coolC that does not last resets the wait: an oscillating temperature moves layers away once
// and keeps them away, it does not make them flap.
//
// Thread-safety: one scheduler thread.
#pragma once

#include <map>
#include <string>
#include <tuple>

#include "base/device_id.h"
#include "policies/policy.h"

namespace jitllm::policies {

class ThermalPolicy final : public Policy {
 public:
  explicit ThermalPolicy(PolicyConfig config) : config_(config) {}
  const char* name() const override { return "thermal"; }
  std::vector<Action> plan(const Snapshot& snapshot) override;

 private:
  struct Heat {
    bool hot = false;
    int64_t coolSinceMs = -1;  // below coolC since then; -1: not
  };
  struct Evacuated {
    DeviceId home;   // the hot device it left
    DeviceId where;  // where it went
  };

  void updateHeat(const Snapshot& snapshot);

  PolicyConfig config_;
  std::map<DeviceId, Heat> heat_;
  std::map<std::pair<std::string, int>, Evacuated> evacuated_;  // (model, unit)
};

}  // namespace jitllm::policies
