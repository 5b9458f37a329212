// Runs a planned step (step_plan.h) over the model's bound units, microbatch by microbatch: the
// embedding, each block where it is bound (whole, split over its shards, or streamed through its
// device), the head over the rows that asked for logits. The hidden state crosses a device
// boundary once per boundary per microbatch, through host memory; each device is charged the time
// the step spent on it (Device::addBusyTime), waits for it included; each device that runs a block
// is told the microbatch's prompt rows, and told to forget them before the head and on failure.
//
// Device ops are issued in exactly the order the units and the block graph name them: the bits of
// a step depend on nothing else (docs/architecture.md, "Guarantees").
//
// What runs where is read from the units as the executor walks them (a pointer compare per unit),
// not cached in the plan: a migration or a tensor-parallel switch flips a unit between two steps,
// and a cached route would be one more thing each flip had to invalidate, for no measurable gain.
//
// Ownership: owns the buffers it reuses across steps (host rows of a boundary, the devices told of
// prompt rows); borrows the config, block graph and workspaces (the model's).
// Thread-safety: the model's step-loop thread.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/runtime/block_graph.h"
#include "engine/runtime/bound_unit.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/step_plan.h"
#include "engine/runtime/workspace.h"

namespace jitllm::runtime {

// Where a step's logits go, microbatch by microbatch: `rows` rows of `logits` on `device` (vocab
// floats each, device memory), the step's positions first..first+rows-1. An interface rather than
// a std::function: a capturing one allocates, and a step allocates nothing.
class HeadOutput {
 public:
  virtual void take(Device& device, float* logits, int64_t first, int64_t rows) = 0;

 protected:
  ~HeadOutput() = default;
};

class StepExecutor final {
 public:
  StepExecutor(const ModelConfig& config, BlockGraph& graph, Workspaces& workspaces)
      : config_(config), graph_(graph), workspaces_(workspaces) {}
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Every microbatch of `plan` through `units` (embedding, blocks, head, in order). Marks each
  // unit that ran as kernelsReady.
  void run(StepPlan& plan, std::vector<BoundUnit>& units, HeadOutput& output);

 private:
  class PromptRowsScope;
  // Charges each device the wall time since the last charge.
  struct BusyClock;

  void runMicrobatch(StepPlan& plan, const StepPlan::Microbatch& m, std::vector<BoundUnit>& units, HeadOutput& output);
  // The hidden state of `tokens` tokens from `from` to `to`'s workspace; returns it.
  Workspace& crossBoundary(Workspace& from, Device& to, int64_t tokens, BusyClock& busy);
  void runBlock(StepPlan& plan, const StepPlan::Microbatch& m, std::vector<BoundUnit>& units, int unit, Workspace& ws,
                PromptRowsScope& prompt);
  // The head over the microbatch's head rows; false when none asked for logits.
  bool runHead(HeadUnit& head, Workspace& ws, const StepPlan::Microbatch& m, std::span<const int32_t> rows,
               HeadOutput& output);
  // Uploads a streamed block's weights into `ws`'s slots one block ahead of the one that runs, and
  // points `unit`'s weights at its slot once its upload is done. Returns that slot.
  int streamIn(std::vector<BoundUnit>& units, int unit, Workspace& ws);

  const ModelConfig& config_;
  BlockGraph& graph_;
  Workspaces& workspaces_;
  std::vector<float> hostRows_;      // the hidden state crossing a boundary
  std::vector<Device*> toldPrompt_;  // devices told the microbatch's prompt rows
};

}  // namespace jitllm::runtime
