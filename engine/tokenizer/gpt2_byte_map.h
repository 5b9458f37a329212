// GPT-2's reversible byte <-> Unicode mapping, which byte-level BPE vocabularies are written in.
//
// Every byte gets a printable code point: the 188 bytes that are already printable Latin-1 keep
// their value ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF); the other 68 (controls, space, DEL, NBSP,
// soft hyphen) take U+0100 upwards in byte order. So a space is 'Ġ' (U+0120) and a newline 'Ċ'
// (U+010A) in vocab and merges text.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <string_view>

namespace jitllm::tokenizer::gpt2_bytes {

// The UTF-8 text (2 bytes at most) of the code point that stands for `byte`.
std::string_view encodeByte(uint8_t byte);

// The byte a code point stands for, or -1 when the code point is not part of the mapping.
int decodeCodepoint(uint32_t cp);

}  // namespace jitllm::tokenizer::gpt2_bytes
