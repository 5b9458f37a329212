// llama.cpp's rules that find special tokens by their text, for files that do not name them:
// end-of-turn ("<|eot_id|>", "<|im_end|>", ...), end-of-message, fill-in-the-middle, the set of
// tokens that end generation, and the attribute fixes that go with them (such tokens become
// control tokens; control tokens named "...unused..." are marked unused; Phi-3's special tokens
// strip whitespace to their right).
//
// Kept apart from Tokenizer because it is a list of heuristics that tracks llama.cpp release by
// release (this one follows llama.cpp v0.4.0, the project's reference), not tokenizer logic.
//
// Thread-safety: a function run once while a Tokenizer is built.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "engine/tokenizer/token_table.h"

namespace jitllm::tokenizer {

// Special ids as the file (or the model defaults) gave them; kNoToken when unknown. Detection fills
// the unknown ones it can.
struct SpecialTokenIds {
  int32_t eos = kNoToken;
  int32_t eot = kNoToken;
  int32_t eom = kNoToken;
  int32_t fimPre = kNoToken;
  int32_t fimSuf = kNoToken;
  int32_t fimMid = kNoToken;
  int32_t fimPad = kNoToken;
  int32_t fimRep = kNoToken;
  int32_t fimSep = kNoToken;
};

// Updates `ids` and the table's attributes, and returns the end-of-generation set.
//
// Where several tokens match one rule, llama.cpp takes whichever its hash map visits first; this
// takes the first text in llama.cpp's list (then the lowest id), which agrees on the vocabularies
// tested but is not guaranteed to for every file.
std::unordered_set<int32_t> detectSpecialTokens(TokenTable& table, SpecialTokenIds& ids,
                                                std::string_view modelName);

}  // namespace jitllm::tokenizer
