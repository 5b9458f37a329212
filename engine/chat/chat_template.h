// Turns chat messages into the prompt text a model was trained on, by running the model's own
// chat template: the Jinja program in its GGUF (`tokenizer.chat_template`), rendered by our
// interpreter (engine/chat/jinja, docs/chat-templates.md) exactly as Hugging Face transformers
// renders it with Python's jinja2. A model without a template gets ChatML, as llama.cpp does.
//
// The template sees the variables transformers gives it:
//   messages               [{role, content, tool_calls?, tool_call_id?, name?}, ...]
//   tools                  the caller's tool definitions (a list), or none
//   documents              none
//   add_generation_prompt  whether to open the assistant's turn
//   bos_token, eos_token   the vocabulary's texts of those tokens
// An assistant message's tool calls arrive as {id, type: "function", function: {name, arguments}}
// with `arguments` parsed into a dict when it is a JSON object (templates `| tojson` it), else the
// text as given.
//
// Stable API for callers (daemon chat RPC, HTTP API, jitllm-run):
//   ChatTemplate t = ChatTemplate::fromModel(jinjaOrNull, bos, eos, modelName, tokenizerAddsBos);
//   t.family()                                   "llama3", "chatml", "gemma", ... for display
//   renderChat(t, messages, addGenerationPrompt, toolsJson)   -> prompt text
// Errors are Error(FAILED) naming the model and the template line: a template that does not
// parse (reported when rendering, so the model still loads for plain generation), one that raises
// or misuses a value, an unknown role, a limit reached. Never a half-rendered prompt.
//
// Thread-safety: a ChatTemplate is immutable; render from any number of threads.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace jitllm::jinja {
class Template;
class Value;
}  // namespace jitllm::jinja

namespace jitllm::runtime {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it / the client sent it
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  std::vector<ToolCall> toolCalls = {};  // an assistant turn that calls tools
  std::string toolCallId = {};           // a tool turn: the call it answers
  std::string name = {};                 // a tool turn: the tool's name
};

struct ChatRenderOptions {
  bool addGenerationPrompt = true;
  std::string toolsJson;  // a JSON array of tool definitions (OpenAI's shape); empty: none
  std::time_t now = 0;    // what the template's strftime_now() sees (UTC); 0: the current time
};

class ChatTemplate {
 public:
  // `jinja`: the GGUF's tokenizer.chat_template (nullopt: none, ChatML is used). When the
  // tokenizer adds BOS itself, a BOS the template writes first is dropped (as llama.cpp does) so
  // the prompt does not start with two.
  static ChatTemplate fromModel(const std::optional<std::string>& jinja, std::string bosToken, std::string eosToken,
                                std::string modelName, bool tokenizerAddsBos);
  // The default for models without a template.
  static ChatTemplate chatMl();

  // A short name of the template's family for display; "jinja" for one we do not recognise,
  // "invalid" for one that does not parse.
  const std::string& family() const { return family_; }
  const std::string& source() const { return source_; }

  // Error(FAILED) "model NAME: chat template line N: ..." when the template cannot render these
  // messages (or did not parse), or for no messages or an unknown role.
  std::string render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options = {}) const;

 private:
  std::shared_ptr<const jinja::Template> program_;
  std::string parseError_;  // set when the source did not parse
  std::string source_, family_, bosToken_, eosToken_, modelName_;
  bool dropLeadingBos_ = false;
};

// The prompt for `messages` (see ChatTemplate::render).
std::string renderChat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool addGenerationPrompt = true,
                       const std::string& toolsJson = "");

// The family a template's text belongs to, recognised by its markers (for display only: the
// template itself is what renders).
std::string chatTemplateFamily(const std::optional<std::string>& jinja);

}  // namespace jitllm::runtime
