// A scheduling policy: plan(snapshot) -> actions. Policies decide; the scheduler executes (with the
// live-migration machinery) and reports. A policy does no I/O and reads no clock but the
// snapshot's, so a sequence of snapshots replays to the same plans - which is how the scenario
// tests drive them. A policy may remember earlier ticks (hysteresis needs that); that memory is
// its own and deterministic.
//
// Every policy honours pins: a pinned unit is never in an action. A model marked `migrating` is
// left alone for the tick.
//
// Thread-safety: one scheduler thread calls plan().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "policies/action.h"
#include "policies/snapshot.h"

namespace jitllm::policies {

// Thresholds, from the daemon config ([scheduler] section, docs/operations.md).
struct PolicyConfig {
  double hotC = 85;            // a device above this is hot: layers move away
  double coolC = 75;           // ... and come back once below this
  int64_t coolForMs = 30000;   // continuously, for this long (hysteresis against flapping)
  double pressureHigh = 0.92;  // a device using more than this fraction of its memory is full
  double pressureLow = 0.80;   // page out until below this
  double headroom = 0.05;      // fraction of a target's memory a move leaves free
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  virtual std::vector<Action> plan(const Snapshot& snapshot) = 0;
};

// "balanced" (default), "thermal", "slo", "pressure", "online"; nullptr for another name.
std::unique_ptr<Policy> makePolicy(const std::string& name, const PolicyConfig& config);
// The names makePolicy knows, for error messages and `jitllmctl policy`.
const std::vector<std::string>& policyNames();

}  // namespace jitllm::policies
