// What a LiveMigration and a TensorParallelSwitch may do to a running model's units, and nothing
// more: read a unit's binding, stage a new one (bound on its devices and warmed there while the
// model keeps running), swap a staged binding in at a token boundary, and drop the workspaces of
// devices no unit runs on any more. The KV pools and sessions they also need are the model's
// public API (Model::kvPool, Model::sessions).
//
// The model implements it (Model::placement()); it replaces the friendship through which the two
// used to reach into the model's private state.
//
// Thread-safety: the model's step-loop thread, between steps.
#pragma once

#include <vector>

#include "kernels/device.h"

namespace jitllm::runtime {

class BoundUnit;  // bound_unit.h

class UnitPlacement {
 public:
  virtual const BoundUnit& binding(int unit) const = 0;
  // The unit bound on `device` (whole) and warmed there; the model's own binding is untouched.
  virtual BoundUnit stage(int unit, Device& device) = 0;
  // A block bound split over `devices` (tensor parallelism, the hidden state's device first) and
  // warmed there, the shards' KV pools made.
  virtual BoundUnit stageSplit(int unit, const std::vector<Device*>& devices, bool partialSums) = 0;
  // The flip: the unit runs from `staged` from the next step on, and `staged` holds the old
  // binding, for the caller to free when it likes. Neither allocates nor throws.
  virtual void swapBinding(int unit, BoundUnit& staged) noexcept = 0;
  // Drops the workspaces of devices no unit runs on any more.
  virtual void releaseIdleWorkspaces() noexcept = 0;

 protected:
  ~UnitPlacement() = default;
};

}  // namespace jitllm::runtime
