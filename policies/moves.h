// What the policies share when they move units: finding the runs of a model's units that may move
// off a device, and the device to move a run to.
//
// Thread-safety: pure functions (MoveBudget is the caller's).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "policies/snapshot.h"

namespace jitllm::policies {

struct UnitRun {
  int first = 0;  // unit numbers, inclusive
  int last = 0;
  size_t bytes = 0;
};

// Maximal runs of consecutive units of `model` that run on `device` and are movable (not pinned,
// not split).
std::vector<UnitRun> movableRuns(const ModelState& model, const DeviceId& device);

// Memory the actions planned this tick will take on each device, so two moves do not both count
// on the same free bytes.
using MoveBudget = std::map<DeviceId, size_t>;

// The device to move `bytes` to, other than `from` and allowed by `allowed`: it must keep
// `headroom` of its memory free after the move. Real GPUs before software devices, then the
// fastest, then the coolest, then the one with most memory free. Null when none fits. Charges
// the bytes to `budget`.
const DeviceState* pickTarget(const Snapshot& snapshot, const DeviceId& from, size_t bytes, double headroom,
                              const std::function<bool(const DeviceState&)>& allowed, MoveBudget& budget);

// "blk.0-blk.27", "token_embd-output" or one name: how reasons and events name a run.
std::string runName(const ModelState& model, const UnitRun& run);

}  // namespace jitllm::policies
