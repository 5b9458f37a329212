#include "engine/chat/chat_template.h"

#include "base/error.h"

namespace jitllm::runtime {

const char* chatTemplateName(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama3:
      return "llama3";
    case ChatTemplate::kChatMl:
      return "chatml";
    case ChatTemplate::kLlama2:
      return "llama2";
  }
  return "unknown";
}

ChatTemplate detectChatTemplate(const std::optional<std::string>& jinja) {
  if (!jinja) return ChatTemplate::kChatMl;
  const std::string& t = *jinja;
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatTemplate::kLlama3;
  if (t.find("<|im_start|>") != std::string::npos) return ChatTemplate::kChatMl;
  if (t.find("[INST]") != std::string::npos) return ChatTemplate::kLlama2;
  return ChatTemplate::kChatMl;
}

std::string renderChat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  JITLLM_REQUIRE(!messages.empty(), "chat: no messages");
  for (const auto& m : messages) {
    JITLLM_REQUIRE(m.role == "system" || m.role == "user" || m.role == "assistant", "chat: unknown role '", m.role,
                   "' (expected system, user or assistant)");
  }
  std::string out;
  switch (t) {
    case ChatTemplate::kLlama3:
      for (const auto& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      }
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatTemplate::kChatMl:
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      out += "<|im_start|>assistant\n";
      return out;
    case ChatTemplate::kLlama2: {
      std::string system;
      bool firstUser = true, afterAssistant = false;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = m.content;
        } else if (m.role == "user") {
          if (afterAssistant) out += "<s>";
          out += "[INST] ";
          if (firstUser && !system.empty()) out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
          out += m.content + " [/INST]";
          firstUser = false;
          afterAssistant = false;
        } else {
          out += " " + m.content + "</s>";
          afterAssistant = true;
        }
      }
      return out;
    }
  }
  return out;
}

}  // namespace jitllm::runtime
