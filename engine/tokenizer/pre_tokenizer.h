// BPE pre-tokenization: splitting text into the words that BPE merges never cross.
//
// Each kind is a hand-written matcher over code points for one regex from a tokenizer.json, written
// to give the same split as llama.cpp's unicode_regex_split (its custom matchers for GPT-2 and
// Llama 3; for Qwen 2 and the default chain, std::regex over category-collapsed text, which means
// the plain regex semantics the matchers here follow). No std::regex: it is slow and knows nothing
// of Unicode categories.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace jitllm::tokenizer {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3, but \p{N} one digit at a time.
  kQwen2,
  // GPT-4o's (o200k), as llama.cpp runs it: words split at case changes and carry their
  // contraction, \p{N}{1,3}, and punctuation runs keep trailing line breaks and slashes. llama.cpp
  // approximates \p{Lu} by "a letter not a-z" and \p{Ll} by "a letter not A-Z", so every letter
  // outside ASCII counts as both, and combining marks are not letters:
  // [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+   (U: letter not a-z, W: letter not A-Z, C: (?i:'s|'t|'re|'ve|'m|'ll|'d))
  kGpt4o,
  // \p{N} (every digit a word of its own), then the GPT-2 regex on the pieces between (refact,
  // starcoder, smollm, command-r and their kin in llama.cpp).
  kDigitsThenGpt2,
  // llama.cpp's fallback chain, each regex splitting the pieces of the one before:
  // [\p{P}\$\+<=>\^~\|]+, then the GPT-2 regex, then \p{N}+, then [0-9][0-9][0-9].
  kDefault,
};

// Splits `cps` into words, appending each word's length in code points to `wordLengths`. The
// lengths add up to cps.size() and none is zero.
void splitWords(PreTokenizerKind kind, std::span<const uint32_t> cps, std::vector<size_t>& wordLengths);

}  // namespace jitllm::tokenizer
