#include "engine/runtime/step_plan.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::runtime {

void StepPlan::validate(std::span<const SequenceInput> inputs, int64_t vocabSize) {
  seen_.clear();
  for (const SequenceInput& in : inputs) {
    JITLLM_REQUIRE(in.session != nullptr, "forward: input without a session");
    JITLLM_REQUIRE(!in.tokens.empty(), "forward: session ", in.session->id(), " was given no tokens");
    JITLLM_REQUIRE(in.promptTokens >= 0 && in.promptTokens <= int64_t(in.tokens.size()), "forward: session ",
                   in.session->id(), ": ", in.promptTokens, " prompt tokens of ", in.tokens.size());
    for (int32_t id : in.tokens) {
      JITLLM_REQUIRE(id >= 0 && id < vocabSize, "token id ", id, " is outside the vocabulary (", vocabSize, " tokens)");
    }
    const int64_t after = in.session->length() + int64_t(in.tokens.size());
    JITLLM_REQUIRE(after <= in.session->contextLimit(), "context limit exceeded: session ", in.session->id(), " holds ",
                   in.session->length(), " tokens, ", in.tokens.size(), " more would pass its limit of ",
                   in.session->contextLimit());
    seen_.push_back(in.session);
  }
  std::sort(seen_.begin(), seen_.end());
  const auto twice = std::adjacent_find(seen_.begin(), seen_.end());
  JITLLM_REQUIRE(twice == seen_.end(), "forward: session ", (*twice)->id(), " appears twice in one batch");
}

void StepPlan::build(std::span<const SequenceInput> inputs, int64_t vocabSize) {
  validate(inputs, vocabSize);
  bool sameShape = shape_.size() == inputs.size();
  shape_.resize(inputs.size());
  ids_.clear();
  positions_.clear();
  sessions_.clear();
  for (size_t i = 0; i < inputs.size(); i++) {
    const SequenceInput& in = inputs[i];
    const InputShape shape{in.tokens.size(), in.promptTokens, in.allLogits};
    sameShape = sameShape && shape_[i] == shape;
    shape_[i] = shape;
    const int64_t base = in.session->length();
    ids_.insert(ids_.end(), in.tokens.begin(), in.tokens.end());
    for (size_t j = 0; j < in.tokens.size(); j++) {
      positions_.push_back(int32_t(base + int64_t(j)));
      sessions_.push_back(in.session);
    }
  }
  if (!sameShape || microbatches_.empty()) layOut();
}

void StepPlan::layOut() {
  microbatches_.clear();
  promptRows_.clear();
  headRows_.clear();
  const int64_t total = int64_t(ids_.size());
  // Walks the inputs' tokens in order: token j of input `in` is a prompt token below its
  // promptTokens and wants logits when allLogits or last.
  size_t in = 0, j = 0;
  for (int64_t t0 = 0; t0 < total; t0 += microbatchTokens_) {
    Microbatch m;
    m.first = t0;
    m.tokens = std::min(microbatchTokens_, total - t0);
    m.promptRowsBegin = promptRows_.size();
    m.headRowsBegin = headRows_.size();
    for (int64_t t = 0; t < m.tokens; t++) {
      const InputShape& s = shape_[in];
      if (int64_t(j) < s.promptTokens) {
        if (promptRows_.size() > m.promptRowsBegin && promptRows_.back().end == t) {
          promptRows_.back().end = t + 1;
        } else {
          promptRows_.push_back({t, t + 1});
        }
      }
      if (s.allLogits || j + 1 == s.tokens) headRows_.push_back(int32_t(t));
      if (++j == s.tokens) {
        in++;
        j = 0;
      }
    }
    m.promptRowsEnd = promptRows_.size();
    m.headRowsEnd = headRows_.size();
    microbatches_.push_back(m);
  }
  for (int j = 0; j < Session::kMaxShards; j++) {
    slots_[j].resize(size_t(std::min(microbatchTokens_, total)));
    pageTables_[j].resize(slots_[j].size());
  }
}

const BlockKv& StepPlan::kv(const Microbatch& m, int layer, int shards) {
  for (int j = 0; j < shards; j++) {
    for (int64_t t = 0; t < m.tokens; t++) {
      const Session& s = *sessions_[size_t(m.first + t)];
      const int table = s.tableOf(layer, j);
      slots_[j][size_t(t)] = s.slotFor(table, positions_[size_t(m.first + t)]);
      pageTables_[j][size_t(t)] = s.pageAddresses(table).data();
    }
    kv_.slots[j] = slots_[j].data();
    kv_.pageTables[j] = pageTables_[j].data();
  }
  return kv_;
}

}  // namespace jitllm::runtime
