#include "engine/tokenizer/codepoint_class.h"

#include <algorithm>

#include "engine/tokenizer/unicode_tables.h"

namespace jitllm::tokenizer {

CodepointClass codepointClass(uint32_t cp) {
  using unicode_tables::ClassRange;
  if (cp > 0x10FFFF) return CodepointClass::kUnassigned;
  const ClassRange* begin = unicode_tables::kClassRanges;
  const ClassRange* end = begin + unicode_tables::kClassRangeCount;
  // The last range whose first code point is <= cp; the table starts at U+0000, so one exists.
  const ClassRange* after =
      std::upper_bound(begin, end, cp, [](uint32_t v, const ClassRange& r) { return v < r.first; });
  return (after - 1)->cls;
}

bool isWhitespace(uint32_t cp) {
  for (size_t i = 0; i < unicode_tables::kWhitespaceRangeCount; ++i) {
    const auto& r = unicode_tables::kWhitespaceRanges[i];
    if (cp < r.first) return false;  // ranges are sorted
    if (cp <= r.last) return true;
  }
  return false;
}

const char* unicodeTablesVersion() { return unicode_tables::kUnicodeVersion; }

}  // namespace jitllm::tokenizer
