#include "engine/tokenizer/bpe_encoder.h"

#include <algorithm>

#include "engine/tokenizer/gpt2_byte_map.h"
#include "engine/tokenizer/utf8.h"

namespace jitllm::tokenizer {

struct BpeEncoder::Symbol {
  uint32_t start;   // into the word
  uint32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
  int32_t token;  // the token whose text this symbol is, or kNoToken
};

namespace {

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t length;  // both symbols' lengths when queued; a mismatch later means it is stale
  int32_t result;
};

// std::push_heap keeps the greatest on top: the lowest rank, then the leftmost pair.
bool lowerPriority(const Bigram& a, const Bigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

}  // namespace

std::string BpeEncoder::textPairKey(std::string_view left, std::string_view right) {
  // Length-prefixed, since either side may contain any byte, spaces included.
  std::string key = std::to_string(left.size());
  key.push_back(':');
  key.append(left);
  key.append(right);
  return key;
}

BpeEncoder::BpeEncoder(const TokenTable& table, const std::vector<std::string>& merges,
                       PreTokenizerKind preTokenizer, bool ignoreMerges)
    : table_(table),
      preTokenizer_(preTokenizer),
      ignoreMerges_(ignoreMerges),
      mergesById_(merges.size()) {
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view merge = merges[i];
    // As llama.cpp: split at the first space after the first byte (so " x" style sides survive);
    // a line without one merges "" with "", which can never match.
    std::string_view first, second;
    const size_t space = merge.find(' ', 1);
    if (space != std::string_view::npos) {
      first = merge.substr(0, space);
      second = merge.substr(space + 1);
    }
    const int32_t rank = int32_t(i);
    const int32_t leftId = table.find(first);
    const int32_t rightId = table.find(second);
    if (leftId != kNoToken && rightId != kNoToken) {
      joined.assign(first);
      joined.append(second);
      // The first (highest-priority) line for a pair wins, as with llama.cpp's map emplace.
      mergesById_.insert(leftId, rightId, BpeMerge{rank, table.find(joined)});
    } else {
      rankByTextPair_.try_emplace(textPairKey(first, second), rank);
    }
  }
}

const BpeMerge* BpeEncoder::findMerge(std::string_view word, const Symbol& left,
                                      const Symbol& right, BpeMerge* scratch) const {
  if (left.token != kNoToken && right.token != kNoToken) {
    return mergesById_.find(left.token, right.token);
  }
  if (rankByTextPair_.empty()) return nullptr;
  const std::string_view l = word.substr(left.start, left.length);
  const std::string_view r = word.substr(right.start, right.length);
  auto it = rankByTextPair_.find(textPairKey(l, r));
  if (it == rankByTextPair_.end()) return nullptr;
  *scratch = BpeMerge{it->second, table_.find(word.substr(left.start, left.length + right.length))};
  return scratch;
}

void BpeEncoder::encodeWord(std::string_view word, std::vector<Symbol>& symbols,
                            std::vector<int32_t>& out) const {
  if (ignoreMerges_) {
    const int32_t whole = table_.find(word);
    if (whole != kNoToken) {
      out.push_back(whole);
      return;
    }
  }

  symbols.clear();
  for (size_t offset = 0; offset < word.size();) {
    const size_t len = std::min(utf8::sequenceLength(uint8_t(word[offset])), word.size() - offset);
    const int32_t index = int32_t(symbols.size());
    symbols.push_back({uint32_t(offset), uint32_t(len), index - 1,
                       offset + len == word.size() ? -1 : index + 1,
                       table_.find(word.substr(offset, len))});
    offset += len;
  }

  std::vector<Bigram> queue;
  auto addBigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[size_t(left)];
    const Symbol& r = symbols[size_t(right)];
    BpeMerge scratch;
    const BpeMerge* merge = findMerge(word, l, r, &scratch);
    if (!merge) return;
    queue.push_back({merge->rank, left, right, l.length + r.length, merge->result});
    std::push_heap(queue.begin(), queue.end(), lowerPriority);
  };
  for (int32_t i = 1; i < int32_t(symbols.size()); ++i) addBigram(i - 1, i);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), lowerPriority);
    const Bigram bigram = queue.back();
    queue.pop_back();
    Symbol& left = symbols[size_t(bigram.left)];
    Symbol& right = symbols[size_t(bigram.right)];
    // A symbol only grows by absorbing its right neighbour, so if both still exist and their
    // lengths add up, their text is the text this pair was ranked for.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) {
      continue;
    }
    left.length += right.length;
    left.token = bigram.result;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
    addBigram(left.prev, bigram.left);
    addBigram(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    if (s.token != kNoToken) {
      out.push_back(s.token);
      continue;
    }
    // Not a token: llama.cpp tries each byte of the symbol's text as a one-byte token and drops
    // the ones that are not.
    for (uint32_t j = 0; j < s.length; ++j) {
      const int32_t id = table_.find(word.substr(s.start + j, 1));
      if (id != kNoToken) out.push_back(id);
    }
  }
}

void BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  utf8::decodeLenient(text, cps);
  std::vector<size_t> wordLengths;
  splitWords(preTokenizer_, cps, wordLengths);

  std::vector<Symbol> symbols;
  std::string raw;   // the word's UTF-8 bytes
  std::string word;  // the same bytes in GPT-2's byte alphabet
  size_t begin = 0;
  for (size_t length : wordLengths) {
    raw.clear();
    for (size_t i = begin; i < begin + length; ++i) utf8::append(raw, cps[i]);
    begin += length;
    word.clear();
    for (char c : raw) word.append(gpt2_bytes::encodeByte(uint8_t(c)));
    encodeWord(word, symbols, out);
  }
}

}  // namespace jitllm::tokenizer
