// JSON in and out of template values: parsing the tools and tool-call arguments a caller hands
// over, and the `tojson` filter, which must print exactly what Python's json.dumps prints (the
// models were trained on its spacing: ", " and ": ", keys in insertion order, non-ASCII kept).
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/chat/jinja/value.h"

namespace jitllm::jinja {

// Parses one JSON document. Error(FAILED) naming the offset for malformed text; nesting deeper
// than 256 levels is refused too (the text may come from a client).
Value parseJson(std::string_view text);

struct JsonStyle {
  std::optional<std::string> indent;  // json.dumps(indent=...): spaces (or the string) per level
  std::string itemSeparator = ", ";   // (", ", ": ") by default, ("," , ": ") with an indent
  std::string keySeparator = ": ";
  bool sortKeys = false;
  bool ensureAscii = false;  // \uXXXX for everything past ASCII
};

// json.dumps(value, ...). Error(FAILED) for what Python could not serialise (Undefined,
// functions, generators).
std::string toJson(const Value& value, const JsonStyle& style);

}  // namespace jitllm::jinja
