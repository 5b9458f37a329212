// Cuts special tokens out of text before the encoders see it, as llama.cpp's
// tokenizer_st_partition: for each special token, longest text first, every occurrence inside the
// still-unsplit text becomes that token. Control and unknown tokens are matched only when the
// caller asks to parse special tokens; user-defined tokens always are (as Hugging Face does).
//
// Thread-safety: immutable after construction; split may run on many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/token_table.h"

namespace jitllm::tokenizer {

struct TextFragment {
  int32_t token = kNoToken;  // a special token, or kNoToken for raw text
  size_t offset = 0;         // raw text: the byte range in the input
  size_t length = 0;
};

class SpecialTokenSplitter final {
 public:
  // Reads the table's attributes now; `table` must outlive the splitter.
  explicit SpecialTokenSplitter(const TokenTable& table);

  // The fragments of `text` in order. Raw fragments are never empty.
  std::vector<TextFragment> split(std::string_view text, bool parseSpecial) const;

 private:
  const TokenTable& table_;
  std::vector<int32_t> candidates_;  // control, user-defined and unknown tokens, longest first
};

}  // namespace jitllm::tokenizer
