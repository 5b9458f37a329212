// "slo": tensor parallelism as a control the scheduler turns for the service tiers' promises
// (docs/tiers.md). Per model, each tick:
//  - interactive replies are running and, since the last tick, more than kMissFraction of the
//    interactive replies that finished missed their targets: split its blocks over twice the
//    devices (1 -> 2 -> 4, as its heads allow), onto idle devices of the backend it runs on with
//    room for their share of its weights (fastest first);
//  - no interactive reply has run for coolForMs and its blocks are split: join them back onto the
//    first device, leaving the others to other work (a split costs each device efficiency that
//    batch replies would rather have);
//  - its interactive replies keep their targets but each of its copies runs kReplicaReplies or
//    more other replies (throughput, not latency, is what they lack): a replica (data
//    parallelism) on an idle device of its backend - no model's units there - with room for all
//    of it;
//  - a replica that ran no reply for coolForMs is dropped.
// A model switches at most once per coolForMs (hysteresis: the goodput of a new split needs time
// to show). Models being migrated, paged out, or whose blocks are pinned are left alone.
//
// Thread-safety: the scheduler thread (Policy).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "policies/policy.h"

namespace jitllm::policies {

class SloPolicy final : public Policy {
 public:
  static constexpr double kMissFraction = 0.1;
  static constexpr int kReplicaReplies = 8;

  explicit SloPolicy(const PolicyConfig& config) : config_(config) {}
  const char* name() const override { return "slo"; }
  std::vector<Action> plan(const Snapshot& snapshot) override;

 private:
  // Its blocks over the next degree m.splits allows, onto idle devices of its backend with room
  // (reason left to the caller); none when there are too few.
  std::optional<Action> widen(const Snapshot& s, const ModelState& m, const std::vector<DeviceId>& current) const;
  // A replica on an idle device of `backend` when each copy runs kReplicaReplies other replies.
  std::optional<Action> replicate(const Snapshot& s, const ModelState& m, const std::string& backend) const;

  struct Memory {
    uint64_t finished = 0, met = 0;  // the interactive counters at the last tick
    int64_t lastInteractiveMs = 0;   // when an interactive reply was last seen running
    int64_t lastSwitchMs = -1;       // when this policy last switched the model (-1: never)
  };
  PolicyConfig config_;
  std::map<std::string, Memory> memory_;  // by model name
};

}  // namespace jitllm::policies
