// libFuzzer target: chat templates (engine/chat/jinja), which come from untrusted GGUF files.
//
// The input is a template's source. It is parsed and, when it parses, rendered for a small
// conversation with tools, under tight limits so that each input stays fast. Refusing an input
// with jitllm::Error is fine; a crash, another exception type, a sanitizer report or a run past
// libFuzzer's time and memory limits is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/error.h"
#include "engine/chat/jinja/json.h"
#include "engine/chat/jinja/template.h"

namespace {

const jitllm::jinja::Value& context() {
  static const jitllm::jinja::Value v = jitllm::jinja::parseJson(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21.5}"},
      {"role": "user", "content": "  Thanks \u00e9 <b> 'q' \"q\"  "}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  jitllm::jinja::RenderOptions options;
  options.limits.maxSteps = 200'000;
  options.limits.maxAllocatedBytes = 16u << 20;
  options.limits.maxOutputBytes = 1u << 20;
  options.now = 1753522200;
  try {
    jitllm::jinja::Template::parse(source).render(context(), options);
  } catch (const jitllm::Error&) {
    // Refused: a syntax error, raise_exception, a type error or a limit.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
