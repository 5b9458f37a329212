// What one Model step does with its inputs, laid out before any device op runs: the inputs checked
// (every error raised before any session changes), their tokens flattened in input order, cut into
// microbatches of at most Model::kMaxStepTokens, each microbatch's prompt rows (the tokens a
// device may compute on its prompt path) and head rows (the tokens whose logits were asked for),
// and - block by block as the executor reaches it - each token's KV slot and page table.
//
// Every array is kept from one step to the next, so planning allocates only while the steps grow.
// The microbatches, prompt rows and head rows depend on the step's shape alone (per input: its
// token count, prompt tokens and allLogits), so a step of the last one's shape - every decode step
// of the same sessions - keeps them and only refills tokens and positions.
//
// Ownership: owns its arrays; the sessions and tokens of the inputs are borrowed for the step.
// Thread-safety: the model's step-loop thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/runtime/block_graph.h"
#include "engine/runtime/model.h"

namespace jitllm::runtime {

class StepPlan final {
 public:
  struct Microbatch {
    int64_t first = 0;   // its first token's index in the step
    int64_t tokens = 0;  // at most the plan's microbatch size
    size_t promptRowsBegin = 0, promptRowsEnd = 0;
    // Into headRows; headRowsBegin is also how many positions' logits the step returned before it.
    size_t headRowsBegin = 0, headRowsEnd = 0;
  };

  explicit StepPlan(int64_t microbatchTokens) : microbatchTokens_(microbatchTokens) {}

  // Checks `inputs` against the sessions' state and the vocabulary (Error(FAILED) naming the
  // input, nothing planned) and lays the step out. The sessions must not change before the step
  // has run (reserving pages is fine: positions come from their lengths).
  void build(std::span<const SequenceInput> inputs, int64_t vocabSize);

  std::span<const Microbatch> microbatches() const { return microbatches_; }
  const int32_t* ids(const Microbatch& m) const { return ids_.data() + m.first; }
  const int32_t* positions(const Microbatch& m) const { return positions_.data() + m.first; }
  // Runs of consecutive prompt tokens, as rows of the microbatch.
  std::span<const Device::RowRange> promptRows(const Microbatch& m) const {
    return std::span(promptRows_).subspan(m.promptRowsBegin, m.promptRowsEnd - m.promptRowsBegin);
  }
  // The microbatch's rows whose logits were asked for, in order.
  std::span<const int32_t> headRows(const Microbatch& m) const {
    return std::span(headRows_).subspan(m.headRowsBegin, m.headRowsEnd - m.headRowsBegin);
  }
  // Each token's KV slot and page table in block `layer` for each of its `shards` shards (valid
  // until the next call). The sessions must have reserved the step's pages.
  const BlockKv& kv(const Microbatch& m, int layer, int shards);

 private:
  struct InputShape {
    size_t tokens;
    int64_t promptTokens;
    bool allLogits;
    bool operator==(const InputShape&) const = default;
  };
  void validate(std::span<const SequenceInput> inputs, int64_t vocabSize);
  // The microbatches, prompt rows and head rows of a step of shape `shape_`.
  void layOut();

  const int64_t microbatchTokens_;
  std::vector<Session*> seen_;  // the inputs' sessions, sorted: duplicates found without a set
  std::vector<InputShape> shape_;
  std::vector<int32_t> ids_, positions_;
  std::vector<Session*> sessions_;
  std::vector<Microbatch> microbatches_;
  std::vector<Device::RowRange> promptRows_;
  std::vector<int32_t> headRows_;
  std::vector<KvSlot> slots_[Session::kMaxShards];
  std::vector<const uint8_t* const*> pageTables_[Session::kMaxShards];
  BlockKv kv_;
};

}  // namespace jitllm::runtime
