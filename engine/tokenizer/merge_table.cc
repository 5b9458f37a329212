#include "engine/tokenizer/merge_table.h"

#include <algorithm>
#include <bit>

namespace jitllm::tokenizer {

MergeTable::MergeTable(size_t expectedEntries) {
  slots_.assign(std::bit_ceil(std::max<size_t>(16, expectedEntries * 2)), Slot{kEmpty, {}});
}

void MergeTable::insert(int32_t left, int32_t right, BpeMerge merge) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = keyOf(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t s = hashOf(key) & mask;; s = (s + 1) & mask) {
    Slot& slot = slots_[s];
    if (slot.key == key) return;  // first wins
    if (slot.key == kEmpty) {
      slot = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

const BpeMerge* MergeTable::find(int32_t left, int32_t right) const {
  const uint64_t key = keyOf(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t s = hashOf(key) & mask;; s = (s + 1) & mask) {
    const Slot& slot = slots_[s];
    if (slot.key == key) return &slot.merge;
    if (slot.key == kEmpty) return nullptr;
  }
}

void MergeTable::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(old.size() * 2, Slot{kEmpty, {}});
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != kEmpty) {
      insert(int32_t(slot.key >> 32), int32_t(uint32_t(slot.key)), slot.merge);
    }
  }
}

}  // namespace jitllm::tokenizer
