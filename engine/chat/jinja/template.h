// A parsed Jinja template and its rendering: our own interpreter of the jinja2 subset that real
// chat templates use (docs/chat-templates.md lists it, and what is refused).
//
// Templates come from GGUF files, so they are untrusted: parsing and rendering are bounded
// (RenderLimits) and every failure - a syntax error, raise_exception(), an undefined value used
// as a string, a limit reached - is an Error(FAILED) whose message starts "line N: ". No input
// makes it crash, hang or grow without bound.
//
// Ownership: a Template owns its syntax tree. Thread-safety: render() is const and may run on
// many threads at once.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "engine/chat/jinja/value.h"

namespace jitllm::jinja {

struct Node;

struct RenderLimits {
  // A long real conversation (1000 turns, 50 tools) takes well under 1M steps and tens of MiB.
  int64_t maxSteps = 5'000'000;           // expressions evaluated and statements run: 2-4 s of a core
  size_t maxOutputBytes = 64u << 20;      // the rendered text
  size_t maxAllocatedBytes = 256u << 20;  // strings and lists made while rendering, summed
  int maxDepth = 200;                     // nested statements, expressions and macro calls
};

struct RenderOptions {
  RenderLimits limits;
  std::time_t now = 0;  // what strftime_now() formats (UTC); 0: the current time
};

class Template {
 public:
  // Error(FAILED) "line N: ..." for what does not parse or is not supported.
  static Template parse(std::string_view source);

  // Renders with `context` (a dict: its keys are the template's variables) on top of the
  // globals range, namespace, dict, raise_exception and strftime_now.
  std::string render(const Value& context, const RenderOptions& options = {}) const;

 private:
  struct Program;
  std::shared_ptr<const Program> program_;
};

}  // namespace jitllm::jinja
