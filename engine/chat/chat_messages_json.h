// Reads a conversation written as JSON in OpenAI's chat shape, for tools and tests:
//   {"messages": [{"role": "user", "content": "Hi"}, ...], "tools": [...]}   or just the array.
// content may be a string, null, or a list of parts whose "text" parts are joined; an assistant's
// tool_calls are [{"id", "type": "function", "function": {"name", "arguments"}}] with arguments
// as a JSON string or an object.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/chat_template.h"

namespace jitllm::runtime {

struct ChatConversation {
  std::vector<ChatMessage> messages;
  std::string toolsJson;  // the "tools" array re-serialised, or empty
};

// Error(FAILED) naming what is malformed.
ChatConversation parseChatConversation(std::string_view json);

}  // namespace jitllm::runtime
