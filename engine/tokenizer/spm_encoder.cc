#include "engine/tokenizer/spm_encoder.h"

#include <algorithm>
#include <cstdio>

#include "engine/tokenizer/utf8.h"

namespace jitllm::tokenizer {
namespace {

struct Symbol {
  uint32_t start;
  uint32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
  int32_t token;  // the token whose text this symbol is, or kNoToken
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t length;  // both symbols' lengths when queued; a mismatch later means it is stale
  int32_t token;
};

// std::push_heap keeps the greatest on top: the highest score, then the leftmost pair.
bool lowerPriority(const Bigram& a, const Bigram& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

}  // namespace

SpmEncoder::SpmEncoder(const TokenTable& table, int32_t unkId) : table_(table) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    int32_t id = table.find(name);
    if (id == kNoToken) {
      const char raw = char(b);
      id = table.find(std::string_view(&raw, 1));
    }
    byteTokens_[size_t(b)] = id == kNoToken ? unkId : id;
  }
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(utf8::sequenceLength(uint8_t(text[offset])), text.size() - offset);
    const int32_t index = int32_t(symbols.size());
    symbols.push_back({uint32_t(offset), uint32_t(len), index - 1,
                       offset + len == text.size() ? -1 : index + 1,
                       table_.find(text.substr(offset, len))});
    offset += len;
  }

  std::vector<Bigram> queue;
  queue.reserve(symbols.size());
  auto tryAddBigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[size_t(left)];
    const uint32_t length = l.length + symbols[size_t(right)].length;
    const int32_t token = table_.find(text.substr(l.start, length));
    if (token == kNoToken) return;
    queue.push_back({table_.score(token), left, right, length, token});
    std::push_heap(queue.begin(), queue.end(), lowerPriority);
  };
  for (int32_t i = 1; i < int32_t(symbols.size()); ++i) tryAddBigram(i - 1, i);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), lowerPriority);
    const Bigram bigram = queue.back();
    queue.pop_back();
    Symbol& left = symbols[size_t(bigram.left)];
    Symbol& right = symbols[size_t(bigram.right)];
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) {
      continue;  // one side was merged elsewhere since this pair was queued
    }
    left.length += right.length;
    left.token = bigram.token;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
    tryAddBigram(left.prev, bigram.left);
    tryAddBigram(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    if (s.token != kNoToken) {
      out.push_back(s.token);
      continue;
    }
    for (uint32_t j = 0; j < s.length; ++j) {
      const int32_t id = byteTokens_[uint8_t(text[s.start + j])];
      if (id != kNoToken) out.push_back(id);
    }
  }
}

}  // namespace jitllm::tokenizer
