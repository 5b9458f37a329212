// Making a unit's kernels ready where it is bound before a request needs them: the kernel variants
// its ops can meet (Device::prepareKernels: compiled ahead, in parallel, for every token count a
// step can give an op), then one run of the unit with a dummy token so its workspace is sized and
// anything compiled on first use is compiled. What a model does at load (Model::prepareKernels), a
// rebind after a device went away, and what a LiveMigration or TensorParallelSwitch does to the
// bindings it stages - so the flip itself never waits for a compile.
//
// Ownership: borrows the config, KV layout, pools, workspaces and block graph (the model's).
// Thread-safety: the model's step-loop thread, with the devices' locks held as for a step.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "engine/kv/kv_pools.h"
#include "engine/runtime/block_graph.h"
#include "engine/runtime/bound_unit.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/workspace.h"

namespace jitllm::runtime {

class UnitWarmUp final {
 public:
  UnitWarmUp(const ModelConfig& config, const KvLayout& kvLayout, KvPools& pools, Workspaces& workspaces,
             BlockGraph& graph)
      : config_(config), kvLayout_(kvLayout), pools_(pools), workspaces_(workspaces), graph_(graph) {}

  // Every unit's kernels, one workload per device (the union of its units': layers share shapes,
  // so each device compiles every variant once, in one parallel batch), then warm(unit, ..., true)
  // for each. `progress` (may be empty) hears each device as it is done. Returns the modules made.
  size_t prepareAll(std::vector<BoundUnit>& units, const std::function<void(size_t done, size_t total)>& progress);
  // Runs `bound` (unit number `unit`) once on its devices with one token at position 0, its KV
  // written to scratch pages; its kernels are made first unless `prepared` says prepareAll did.
  // A streamed block is left alone: its weights visit the device only in a step.
  void warm(int unit, BoundUnit& bound, bool prepared = false);

 private:
  // What the unit runs on its device at up to a full microbatch (a block: its shard `shard`).
  KernelWorkload workload(const BoundUnit& bound, size_t shard) const;
  KernelWorkload blockWorkload(const BlockUnit& block, size_t shard) const;
  void warmSplit(int unit, BlockUnit& block, bool prepared);
  void warmBlock(int unit, BlockShard& block, Workspace& ws);

  const ModelConfig& config_;
  const KvLayout& kvLayout_;
  KvPools& pools_;
  Workspaces& workspaces_;
  BlockGraph& graph_;
};

}  // namespace jitllm::runtime
