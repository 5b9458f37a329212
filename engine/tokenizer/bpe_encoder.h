// Byte-level BPE encoding (tokenizer.ggml.model = "gpt2"), as llama.cpp's
// llm_tokenizer_bpe_session: pre-tokenize into words, write each word's bytes in GPT-2's byte
// alphabet, then repeatedly apply the lowest-ranked merge among adjacent symbols (leftmost on
// ties) and emit the resulting tokens.
//
// Merge ranks are keyed by the two token ids rather than by strings, so the merge loop never
// builds a string; merges naming text that is not itself a token (rare, but files have them) keep
// a string-keyed map so that the result is still exactly llama.cpp's.
//
// Thread-safety: immutable after construction; encode may run on many threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/merge_table.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/token_table.h"

namespace jitllm::tokenizer {

class BpeEncoder final {
 public:
  // `table` must outlive the encoder. `ignoreMerges` (Llama 3) emits a whole word as one token when
  // the vocabulary has it, before trying any merge.
  BpeEncoder(const TokenTable& table, const std::vector<std::string>& merges,
             PreTokenizerKind preTokenizer, bool ignoreMerges);

  // Appends the tokens of `text` (any bytes; invalid UTF-8 is read as llama.cpp reads it).
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  PreTokenizerKind preTokenizer() const { return preTokenizer_; }

 private:
  struct Symbol;

  void encodeWord(std::string_view word, std::vector<Symbol>& symbols,
                  std::vector<int32_t>& out) const;
  // The merge for two adjacent symbols, or nullptr.
  const BpeMerge* findMerge(std::string_view word, const Symbol& left, const Symbol& right,
                            BpeMerge* scratch) const;
  static std::string textPairKey(std::string_view left, std::string_view right);

  const TokenTable& table_;
  PreTokenizerKind preTokenizer_;
  bool ignoreMerges_;
  MergeTable mergesById_;
  std::unordered_map<std::string, int32_t> rankByTextPair_;  // merges with a non-token side
};

}  // namespace jitllm::tokenizer
