#include "engine/tokenizer/utf8.h"

namespace jitllm::tokenizer::utf8 {
namespace {

bool isContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

void decodeLenient(std::string_view text, std::vector<uint32_t>& out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    if (!(b0 & 0x80)) {
      out.push_back(b0);
      i += 1;
    } else if (!(b0 & 0x40)) {
      out.push_back(kReplacementChar);  // a stray continuation byte
      i += 1;
    } else if (!(b0 & 0x20)) {
      if (i + 1 >= n || !isContinuation(s[i + 1])) {
        out.push_back(kReplacementChar);
        i += 1;
        continue;
      }
      out.push_back(((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu));
      i += 2;
    } else if (!(b0 & 0x10)) {
      if (i + 2 >= n || !isContinuation(s[i + 1]) || !isContinuation(s[i + 2])) {
        out.push_back(kReplacementChar);
        i += 1;
        continue;
      }
      out.push_back(((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu));
      i += 3;
    } else if (!(b0 & 0x08)) {
      if (i + 3 >= n || !isContinuation(s[i + 1]) || !isContinuation(s[i + 2]) ||
          !isContinuation(s[i + 3])) {
        out.push_back(kReplacementChar);
        i += 1;
        continue;
      }
      out.push_back(((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                    (s[i + 3] & 0x3Fu));
      i += 4;
    } else {
      out.push_back(kReplacementChar);  // 0xF8..0xFF never start a sequence
      i += 1;
    }
  }
}

void append(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

SequenceStatus checkSequence(std::string_view bytes, size_t* length) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  const uint8_t b0 = s[0];
  if (b0 < 0x80) {
    *length = 1;
    return SequenceStatus::kComplete;
  }
  // Table 3-7 of the Unicode standard: the lead byte fixes the length and the range of the second
  // byte (which is what excludes overlongs, surrogates and values past U+10FFFF).
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *length = 1;
    return SequenceStatus::kInvalid;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) {
      *length = i;
      return SequenceStatus::kIncomplete;
    }
    const uint8_t b = s[i];
    const bool ok = (i == 1) ? (b >= lo && b <= hi) : isContinuation(b);
    if (!ok) {
      *length = i;
      return SequenceStatus::kInvalid;
    }
  }
  *length = need;
  return SequenceStatus::kComplete;
}

bool isValid(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 0;
    if (checkSequence(text.substr(i), &len) != SequenceStatus::kComplete) return false;
    i += len;
  }
  return true;
}

}  // namespace jitllm::tokenizer::utf8
