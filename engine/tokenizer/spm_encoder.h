// SentencePiece-style encoding (tokenizer.ggml.model = "llama"), as llama.cpp's
// llm_tokenizer_spm_session: start from one symbol per UTF-8 character, repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring token (leftmost on ties), then emit each
// symbol's token, or its bytes as <0xXX> byte-fallback tokens when it is not a token.
//
// Thread-safety: immutable after construction; encode may run on many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/token_table.h"

namespace jitllm::tokenizer {

class SpmEncoder final {
 public:
  // `table` must outlive the encoder. A byte with no <0xXX> token (nor a one-byte token) falls back
  // to `unkId`, or is dropped when that is kNoToken; llama.cpp would throw there.
  SpmEncoder(const TokenTable& table, int32_t unkId);

  // Appends the tokens of `text` to `out`. The caller has already applied the SentencePiece
  // normalisation (space prefix, ' ' -> U+2581).
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  int32_t byteToken(uint8_t byte) const { return byteTokens_[byte]; }

 private:
  const TokenTable& table_;
  std::array<int32_t, 256> byteTokens_;
};

}  // namespace jitllm::tokenizer
