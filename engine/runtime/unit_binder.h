// Binding a model's units to devices: which device each unit goes to (the load options'
// placement, placer or tensor-parallel split) and its weights made usable there - copied into
// device memory, viewed in place on the CPU, split by rows and columns over a tensor-parallel
// block's devices, or copied once into pinned host memory to be streamed through a device.
//
// What it makes is a BoundUnit (bound_unit.h) and nothing else: the KV pools, workspaces and
// kernels a unit also needs on its device are the model's (Model, UnitWarmUp).
//
// Ownership: borrows the config and tensors (and through them the file mapping), which must
// outlive it; the bindings it returns view the mapping too.
// Thread-safety: const methods, callable from any thread; the devices' own rules apply to the
// uploads (the callers hold DeviceLocks where other threads drive the devices).
#pragma once

#include <cstddef>
#include <vector>

#include "engine/runtime/bound_unit.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/model_tensors.h"

namespace jitllm::runtime {

struct ModelLoadOptions;  // model.h

class UnitBinder final {
 public:
  UnitBinder(const ModelConfig& config, const ModelTensors& tensors) : config_(config), tensors_(tensors) {}

  // Every unit of a model being loaded, placed as `options` say. The placer (if any) is told each
  // unit's weight bytes, `kvBytesPerToken` (one block's KV for one token) and `workspaceBytes`.
  std::vector<BoundUnit> bindAll(const ModelLoadOptions& options, size_t kvBytesPerToken, size_t workspaceBytes) const;
  // The unit's weights made usable on `device`; `streamed`: a block whose weights visit the device
  // each step instead of staying there.
  BoundUnit bind(int unit, Device& device, bool streamed = false) const;
  // A block split over `devices` (tensor parallelism), the hidden state's device first.
  BoundUnit bindSplit(int unit, const std::vector<Device*>& devices, bool partialSums) const;

 private:
  int unitCount() const { return int(config_.layers) + 2; }
  std::vector<size_t> unitWeightBytes() const;
  BlockUnit bindBlock(int unit, Device& device) const;
  BlockUnit bindStreamedBlock(int unit, Device& device) const;

  const ModelConfig& config_;
  const ModelTensors& tensors_;
};

}  // namespace jitllm::runtime
