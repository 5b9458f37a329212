// The ops of one transformer block, in the order every architecture shares (docs/architecture.md,
// "Model architectures"): the attention branch (norm, q/k/v products, per-head norms, rope and KV
// store, attention, output projection) and the FFN branch (norm, gate and up, SwiGLU or GEGLU, down
// projection), each joining the residual through its post norm and residual scale where the
// architecture has them. ModelConfig names the differences; the op order is the bits' contract:
// changing it changes every golden.
//
// A tensor-parallel block runs the same ops per shard (its heads, its FFN rows) with the hidden
// state broadcast from the first device before each branch, and the products that run whole
// there over the shards' gathered outputs - or, with partial sums, added in shard order.
//
// Ownership: owns the rope factors and the buffers a split block reuses; borrows the config, KV
// layout and workspaces (the model's), which must outlive it.
// Thread-safety: the model's step-loop thread (the caller holds the devices' locks as a step does).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/runtime/bound_unit.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/session.h"
#include "engine/runtime/workspace.h"

namespace jitllm::runtime {

// Where a block's tokens keep their KV: per shard (one unless the block is split), each token's
// slot for its new K and V and its page table to attend over. Arrays of the microbatch's tokens.
struct BlockKv {
  const KvSlot* slots[Session::kMaxShards] = {};
  const uint8_t* const* const* pageTables[Session::kMaxShards] = {};
};

class BlockGraph final {
 public:
  BlockGraph(const ModelConfig& config, const KvLayout& kvLayout, std::vector<float> ropeFactors,
             Workspaces& workspaces);
  BlockGraph(const BlockGraph&) = delete;
  BlockGraph& operator=(const BlockGraph&) = delete;

  // A whole block on its device: `tokens` hidden states in ws.x, updated in place.
  void run(const BlockShard& block, int layer, Workspace& ws, int64_t tokens, const int32_t* positions,
           const BlockKv& kv);
  // A block split over its shards' devices; the hidden states are in the first shard's workspace.
  void runSplit(const BlockUnit& block, int layer, int64_t tokens, const int32_t* positions, const BlockKv& kv);

 private:
  // The attention branch up to the output projection's input: ws.attn gets `heads` heads' outputs
  // per token (the shard's share), KV stored by `kv`'s layout.
  void attentionHeads(const BlockShard& block, int layer, Workspace& ws, int64_t tokens, const int32_t* positions,
                      const KvSlot* slots, const uint8_t* const* const* pageTables, int heads, const KvLayout& kv);
  // The FFN branch up to the down projection's input: ws.gate gets `rows` activations per token.
  void ffnHidden(const BlockShard& block, Workspace& ws, int64_t tokens, int64_t rows);
  // A branch's output in `branch` joins the residual ws.x: through its post norm (into `spare`)
  // and the residual scale where the architecture has them.
  void joinResidual(Device& device, Workspace& ws, float* branch, const float* postNorm, float* spare, int64_t tokens);

  const ModelConfig& config_;
  const KvLayout& kvLayout_;
  const std::vector<float> ropeFactors_;  // llama3's rope_freqs or phi3's LongRoPE factors; may be empty
  Workspaces& workspaces_;
  // A split block's per-step working arrays, reused: its shards' workspaces and the row order
  // that interleaves their stacked outputs.
  std::vector<Workspace*> shardWorkspaces_;
  std::vector<int32_t> order_;
};

}  // namespace jitllm::runtime
