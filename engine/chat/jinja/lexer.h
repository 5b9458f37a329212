// Splits a template's source into text and the tokens inside its tags, applying jinja2's
// whitespace control as transformers configures it (trim_blocks and lstrip_blocks on,
// keep_trailing_newline off):
//   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}` / `-#}` all after;
//   - lstrip_blocks: spaces and tabs between a line's start and a `{%` or `{#` go (not before `{{`,
//     and not with `{%+`);
//   - trim_blocks: the one newline right after a `%}` or `#}` goes (not after `+%}`);
//   - `\r\n` and `\r` read as `\n`, and one newline at the very end of the source is dropped.
// Comments vanish here; {% raw %}...{% endraw %} becomes text.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::jinja {

enum class TokenType {
  kText,        // literal output
  kPrintBegin,  // {{
  kPrintEnd,    // }}
  kTagBegin,    // {%
  kTagEnd,      // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,  // text holds it: "==", "(", "|", ...
  kEnd,
};

struct Token {
  TokenType type;
  std::string text;
  int line;  // 1-based line of the source where the token starts
  int64_t intValue = 0;
  double floatValue = 0;
};

// Error(FAILED) naming the line for an unterminated tag, comment or string, or a character no
// expression can hold. Inputs past kMaxTemplateBytes are refused.
std::vector<Token> tokenize(std::string_view source);

inline constexpr size_t kMaxTemplateBytes = 4 << 20;

}  // namespace jitllm::jinja
