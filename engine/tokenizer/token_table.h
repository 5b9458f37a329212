// The token list of a vocabulary: each id's text, score and attributes, and text -> id lookup.
//
// Owns the token texts; lookups take string_views and never allocate, which is what keeps the
// merge loops of both encoders cheap. When two ids share a text, lookup finds the higher id, as
// llama.cpp's token_to_id map (filled in id order, later ids overwriting) does.
//
// Thread-safety: immutable once the owning Tokenizer is built; const access from many threads is
// safe. setAttributes exists only for that construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::tokenizer {

inline constexpr int32_t kNoToken = -1;

// Token attributes (llama.cpp's llama_token_attr bits), derived from tokenizer.ggml.token_type.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,  // rendered only when asked (special = true)
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,  // SentencePiece <0xXX> byte-fallback token
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,  // special-token matching eats whitespace to its left
  kAttrRstrip = 1u << 8,  // ... and to its right
  kAttrSingleWord = 1u << 9,
};

class TokenTable final {
 public:
  // `texts` must not be empty of entries that are themselves empty (the caller renames those);
  // scores and attributes have one entry per text.
  TokenTable(std::vector<std::string> texts, std::vector<float> scores,
             std::vector<uint32_t> attributes);
  TokenTable(const TokenTable&) = delete;
  TokenTable& operator=(const TokenTable&) = delete;

  int32_t size() const { return int32_t(texts_.size()); }
  bool contains(int32_t id) const { return id >= 0 && id < size(); }

  std::string_view text(int32_t id) const { return texts_[size_t(id)]; }
  float score(int32_t id) const { return scores_[size_t(id)]; }
  uint32_t attributes(int32_t id) const { return attributes_[size_t(id)]; }
  void setAttributes(int32_t id, uint32_t attributes) { attributes_[size_t(id)] = attributes; }

  // The id whose text is exactly `text`, or kNoToken.
  int32_t find(std::string_view text) const;

 private:
  // The text -> id index is open addressing over a flat array rather than std::unordered_map:
  // building a 150k-token tokenizer does about a million lookups (merges, pieces), and a node per
  // entry made them cache misses that cost most of the construction time.
  struct Slot {
    uint32_t hashTag;  // high bits of the hash, to skip most string compares
    int32_t id;        // kNoToken for an empty slot
  };
  static uint64_t hashOf(std::string_view text);

  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<uint32_t> attributes_;
  std::vector<Slot> slots_;  // size is a power of two, at most half full
  size_t slotMask_ = 0;
};

}  // namespace jitllm::tokenizer
