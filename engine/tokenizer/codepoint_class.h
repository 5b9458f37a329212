// What a BPE pre-tokenizer pattern needs to know about one Unicode code point: its coarse general
// category (\p{L}, \p{N}, \p{P}, ...) and whether it is whitespace (\s).
//
// Whitespace is Unicode's White_Space property, as in llama.cpp; it is independent of the class
// (U+0085 is a control character and whitespace). Values beyond U+10FFFF, which llama.cpp's lenient
// UTF-8 decoder can produce, are kUnassigned and not whitespace.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstdint>

namespace jitllm::tokenizer {

enum class CodepointClass : uint8_t {
  kUnassigned,   // Cn, and anything past U+10FFFF
  kLetter,       // Lu Ll Lt Lm Lo
  kNumber,       // Nd Nl No
  kPunctuation,  // Pc Pd Ps Pe Pi Pf Po
  kSymbol,       // Sm Sc Sk So
  kMark,         // Mn Mc Me
  kSeparator,    // Zs Zl Zp
  kOther,        // Cc Cf Cs Co
};

CodepointClass codepointClass(uint32_t cp);
bool isWhitespace(uint32_t cp);

inline bool isLetter(uint32_t cp) { return codepointClass(cp) == CodepointClass::kLetter; }
inline bool isNumber(uint32_t cp) { return codepointClass(cp) == CodepointClass::kNumber; }

// The Unicode version the committed tables were generated from.
const char* unicodeTablesVersion();

}  // namespace jitllm::tokenizer
