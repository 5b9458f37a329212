#include "engine/chat/chat_template.h"

#include "base/error.h"
#include "engine/chat/jinja/json.h"
#include "engine/chat/jinja/template.h"

namespace jitllm::runtime {

namespace {

using jinja::Value;

// llama.cpp's default for models without a template (ChatML), written as the template it is.
constexpr const char* kChatMlSource =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

Value toolCallValue(const ToolCall& call) {
  Value arguments(call.arguments);
  try {
    Value parsed = jinja::parseJson(call.arguments);
    if (parsed.isDict()) arguments = parsed;
  } catch (const Error&) {
    // Not JSON: the template gets the text as it is.
  }
  return Value::dict({{"id", Value(call.id)},
                      {"type", Value("function")},
                      {"function", Value::dict({{"name", Value(call.name)}, {"arguments", arguments}})}});
}

Value messageValue(const ChatMessage& m) {
  std::vector<std::pair<std::string, Value>> entries = {{"role", Value(m.role)}, {"content", Value(m.content)}};
  if (!m.toolCalls.empty()) {
    std::vector<Value> calls;
    for (const auto& c : m.toolCalls) calls.push_back(toolCallValue(c));
    entries.emplace_back("tool_calls", Value::list(std::move(calls)));
  }
  if (!m.toolCallId.empty()) entries.emplace_back("tool_call_id", Value(m.toolCallId));
  if (!m.name.empty()) entries.emplace_back("name", Value(m.name));
  return Value::dict(std::move(entries));
}

bool contains(const std::string& s, const char* marker) { return s.find(marker) != std::string::npos; }

}  // namespace

std::string chatTemplateFamily(const std::optional<std::string>& jinja) {
  if (!jinja) return "chatml";
  const std::string& t = *jinja;
  if (contains(t, "<|start_header_id|>")) return "llama3";
  if (contains(t, "<start_of_turn>")) return "gemma";
  if (contains(t, "<|im_sep|>")) return "phi4";
  if (contains(t, "<|im_start|>")) return contains(t, "<think>") ? "chatml-think" : "chatml";
  if (contains(t, "<|start_of_role|>")) return "granite";
  if (contains(t, "<|channel|>")) return "gpt-oss";
  if (contains(t, "<|user|>") || contains(t, "<|assistant|>")) return "phi3";
  if (contains(t, "<｜User｜>") || contains(t, "<｜Assistant｜>")) return "deepseek";
  if (contains(t, "<|START_OF_TURN_TOKEN|>")) return "command-r";
  if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? "llama2" : "mistral";
  return "jinja";
}

ChatTemplate ChatTemplate::fromModel(const std::optional<std::string>& jinja, std::string bosToken,
                                     std::string eosToken, std::string modelName, bool tokenizerAddsBos) {
  ChatTemplate t;
  t.source_ = jinja ? *jinja : kChatMlSource;
  t.family_ = chatTemplateFamily(jinja);
  t.bosToken_ = std::move(bosToken);
  t.eosToken_ = std::move(eosToken);
  t.modelName_ = std::move(modelName);
  t.dropLeadingBos_ = tokenizerAddsBos && !t.bosToken_.empty();
  try {
    t.program_ = std::make_shared<const jinja::Template>(jinja::Template::parse(t.source_));
  } catch (const Error& e) {
    t.parseError_ = e.what();
    t.family_ = "invalid";
  }
  return t;
}

ChatTemplate ChatTemplate::chatMl() { return fromModel(std::nullopt, "", "", "chatml", false); }

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  const std::string who = "model " + (modelName_.empty() ? std::string("(unnamed)") : modelName_);
  JITLLM_REQUIRE(program_, who, ": its chat template cannot be used: ", parseError_);
  JITLLM_REQUIRE(!messages.empty(), "chat: no messages");
  std::vector<Value> list;
  for (const auto& m : messages) {
    JITLLM_REQUIRE(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
                   "chat: unknown role '", m.role, "' (expected system, user, assistant or tool)");
    list.push_back(messageValue(m));
  }
  Value tools{jinja::None{}};
  if (!options.toolsJson.empty()) {
    tools = jinja::parseJson(options.toolsJson);
    JITLLM_REQUIRE(tools.isList(), "chat: tools must be a JSON array of tool definitions");
  }
  Value context = Value::dict({
      {"messages", Value::list(std::move(list))},
      {"tools", tools},
      {"documents", Value(jinja::None{})},
      {"add_generation_prompt", Value(options.addGenerationPrompt)},
      {"bos_token", Value(bosToken_)},
      {"eos_token", Value(eosToken_)},
  });
  jinja::RenderOptions renderOptions;
  renderOptions.now = options.now;
  std::string out;
  try {
    out = program_->render(context, renderOptions);
  } catch (const Error& e) {
    JITLLM_FAIL(kFailed, who, ": chat template ", e.what());
  }
  if (dropLeadingBos_ && out.starts_with(bosToken_)) out.erase(0, bosToken_.size());
  return out;
}

std::string renderChat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool addGenerationPrompt,
                       const std::string& toolsJson) {
  ChatRenderOptions options;
  options.addGenerationPrompt = addGenerationPrompt;
  options.toolsJson = toolsJson;
  return t.render(messages, options);
}

}  // namespace jitllm::runtime
