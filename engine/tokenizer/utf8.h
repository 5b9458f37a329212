// UTF-8 decoding and encoding as the tokenizers need it.
//
// Two decoders on purpose. decodeLenient reproduces llama.cpp's unicode_cpts_from_utf8 bit for bit
// (no overlong or surrogate checks, one U+FFFD per byte it cannot start a sequence at), because BPE
// pre-tokenization must see the same code points llama.cpp sees to produce the same tokens.
// checkSequence is strict (RFC 3629) and serves output: what we hand to a client must be valid.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::tokenizer::utf8 {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// The sequence length a lead byte announces, as llama.cpp's unicode_len_utf8: 1 for ASCII and for
// stray continuation bytes, 2/3/4 from the high nibble. Symbol splitting in both encoders uses it.
inline size_t sequenceLength(uint8_t lead) {
  static constexpr uint8_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

// Appends the code points of `text` to `out`, llama.cpp's way (see above).
void decodeLenient(std::string_view text, std::vector<uint32_t>& out);

// Appends the UTF-8 encoding of `cp`; values past U+10FFFF become U+FFFD.
void append(std::string& out, uint32_t cp);

enum class SequenceStatus {
  kComplete,    // a well-formed sequence of `length` bytes
  kIncomplete,  // a well-formed prefix that runs to the end of the input; more bytes may finish it
  kInvalid,     // `length` bytes (the maximal ill-formed subpart) stand for one U+FFFD
};

// Examines the sequence that starts at bytes[0] (bytes must not be empty).
SequenceStatus checkSequence(std::string_view bytes, size_t* length);

// True when all of `text` is well-formed UTF-8.
bool isValid(std::string_view text);

}  // namespace jitllm::tokenizer::utf8
