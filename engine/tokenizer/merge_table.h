// BPE merge ranks keyed by the pair of token ids being merged: (left, right) -> (rank, result).
//
// Open addressing over one flat array: Llama 3 has 280k merges and the merge loop looks one up
// for every adjacent symbol pair, so this is on both the construction and the encoding hot path.
//
// Thread-safety: build single-threaded with insert; after that, find from many threads is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jitllm::tokenizer {

struct BpeMerge {
  int32_t rank;    // position in tokenizer.ggml.merges; lower merges first
  int32_t result;  // the token for the joined text, or -1 when the vocabulary lacks it
};

class MergeTable final {
 public:
  explicit MergeTable(size_t expectedEntries);

  // Keeps the first entry for a pair, as llama.cpp's std::map::emplace does.
  void insert(int32_t left, int32_t right, BpeMerge merge);
  const BpeMerge* find(int32_t left, int32_t right) const;

 private:
  struct Slot {
    uint64_t key;  // kEmpty, or left << 32 | right
    BpeMerge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative, so never a real key

  static uint64_t keyOf(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  static size_t hashOf(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return size_t(key);
  }
  void grow();

  std::vector<Slot> slots_;  // power-of-two size, at most half full
  size_t size_ = 0;
};

}  // namespace jitllm::tokenizer
