// Turns chat messages into the prompt text a model was trained on.
//
// Three families cover the models we run; which one a model uses is recognised from its GGUF
// `tokenizer.chat_template` (a Jinja template we do not execute, only identify by its markers):
//   llama3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
//   chatml  <|im_start|>role\ncontent<|im_end|>\n            (Qwen2, and the default, as llama.cpp)
//   llama2  [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] assistant</s><s>[INST] ...  (Mistral too)
// The BOS token is not written here: tokenizing with addSpecial adds it as the model says.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace jitllm::runtime {

enum class ChatTemplate { kLlama3, kChatMl, kLlama2 };

const char* chatTemplateName(ChatTemplate t);
ChatTemplate detectChatTemplate(const std::optional<std::string>& jinja);

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// The prompt for the next assistant turn. Error(FAILED) for an unknown role or no messages.
std::string renderChat(ChatTemplate t, const std::vector<ChatMessage>& messages);

}  // namespace jitllm::runtime
