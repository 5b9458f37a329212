// Builds the syntax tree of a template from its tokens (lexer.h): the statements chat templates
// use (if/elif/else, for with loop filters and else, set, set blocks, namespace attributes,
// macros, filter blocks, break/continue, transformers' {% generation %}) and jinja2's expression
// grammar with its precedence (filters and tests bind tighter than arithmetic).
//
// What it refuses - include/import/extends/block/call/with/do, recursive loops - is an error
// naming the tag and its line, so a template we cannot run is never run half-way.
//
// Thread-safety: pure function.
#pragma once

#include <string_view>

#include "engine/chat/jinja/ast.h"

namespace jitllm::jinja {

// Error(FAILED) "line N: ..." for a syntax error or an unsupported construct. Nesting deeper
// than kMaxParseDepth (brackets, blocks) is refused rather than recursed into.
Body parseTemplate(std::string_view source);

inline constexpr int kMaxParseDepth = 128;

}  // namespace jitllm::jinja
