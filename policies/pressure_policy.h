// "pressure": keeps every device below its memory threshold.
//
// When a device uses more than config.pressureHigh of its memory, idle models on it (no session
// running) are paged out, least recently used first, until the device would be below
// config.pressureLow; only when no idle model is left do the unpinned layers of busy models move
// to devices with room. Paging out an idle model costs nothing until it is used again, a moved
// layer costs every step a device crossing: hence that order.
//
// A paged-out model that has sessions again goes back to where it ran (ModelState::home), one run
// of units per tick, once its device is there with room below config.pressureLow. It keeps
// answering meanwhile: the units run where they were paged out to, and move home live.
//
// Thread-safety: one scheduler thread.
#pragma once

#include "policies/policy.h"

namespace jitllm::policies {

class PressurePolicy final : public Policy {
 public:
  explicit PressurePolicy(PolicyConfig config) : config_(config) {}
  const char* name() const override { return "pressure"; }
  std::vector<Action> plan(const Snapshot& snapshot) override;

 private:
  PolicyConfig config_;
};

}  // namespace jitllm::policies
