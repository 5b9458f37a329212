#include "engine/tokenizer/token_table.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/error.h"

namespace jitllm::tokenizer {

uint64_t TokenTable::hashOf(std::string_view text) {
  // FNV-1a with a final mix: tokens are short, so a simple byte loop beats a block hash.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return h;
}

TokenTable::TokenTable(std::vector<std::string> texts, std::vector<float> scores,
                       std::vector<uint32_t> attributes)
    : texts_(std::move(texts)), scores_(std::move(scores)), attributes_(std::move(attributes)) {
  JITLLM_ASSERT(scores_.size() == texts_.size() && attributes_.size() == texts_.size());
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, texts_.size() * 2));
  slots_.assign(capacity, Slot{0, kNoToken});
  slotMask_ = capacity - 1;
  for (size_t i = 0; i < texts_.size(); ++i) {
    const std::string_view text = texts_[i];
    const uint64_t h = hashOf(text);
    const uint32_t tag = uint32_t(h >> 32);
    for (size_t s = size_t(h) & slotMask_;; s = (s + 1) & slotMask_) {
      Slot& slot = slots_[s];
      if (slot.id == kNoToken) {
        slot = Slot{tag, int32_t(i)};
        break;
      }
      if (slot.hashTag == tag && texts_[size_t(slot.id)] == text) {
        slot.id = int32_t(i);  // a later duplicate wins, as in llama.cpp's token_to_id
        break;
      }
    }
  }
}

int32_t TokenTable::find(std::string_view text) const {
  const uint64_t h = hashOf(text);
  const uint32_t tag = uint32_t(h >> 32);
  for (size_t s = size_t(h) & slotMask_;; s = (s + 1) & slotMask_) {
    const Slot& slot = slots_[s];
    if (slot.id == kNoToken) return kNoToken;
    if (slot.hashTag == tag) {
      const std::string& candidate = texts_[size_t(slot.id)];
      if (candidate.size() == text.size() &&
          std::memcmp(candidate.data(), text.data(), text.size()) == 0) {
        return slot.id;
      }
    }
  }
}

}  // namespace jitllm::tokenizer
