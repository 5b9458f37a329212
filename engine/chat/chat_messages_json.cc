#include "engine/chat/chat_messages_json.h"

#include "base/error.h"
#include "engine/chat/jinja/json.h"

namespace jitllm::runtime {

namespace {

using jinja::Value;

std::string field(const Value& object, const char* key) {
  const Value* v = object.asDict().find(key);
  if (!v || v->isNone()) return "";
  JITLLM_REQUIRE(v->isString(), "chat JSON: \"", key, "\" must be a string");
  return v->asString();
}

std::string contentText(const Value* content) {
  if (!content || content->isNone()) return "";
  if (content->isString()) return content->asString();
  JITLLM_REQUIRE(content->isList(), "chat JSON: \"content\" must be a string, null or a list of parts");
  std::string text;
  for (const auto& part : content->asList().items) {
    JITLLM_REQUIRE(part.isDict(), "chat JSON: each content part must be an object");
    text += field(part, "text");
  }
  return text;
}

}  // namespace

ChatConversation parseChatConversation(std::string_view json) {
  Value doc = jinja::parseJson(json);
  Value messages = doc;
  ChatConversation out;
  if (doc.isDict()) {
    const Value* m = doc.asDict().find("messages");
    JITLLM_REQUIRE(m, "chat JSON: no \"messages\"");
    messages = *m;
    if (const Value* tools = doc.asDict().find("tools"); tools && !tools->isNone()) {
      JITLLM_REQUIRE(tools->isList(), "chat JSON: \"tools\" must be an array");
      if (!tools->asList().items.empty()) out.toolsJson = jinja::toJson(*tools, {});
    }
  }
  JITLLM_REQUIRE(messages.isList(), "chat JSON: \"messages\" must be an array");
  for (const auto& m : messages.asList().items) {
    JITLLM_REQUIRE(m.isDict(), "chat JSON: each message must be an object");
    ChatMessage msg;
    msg.role = field(m, "role");
    msg.content = contentText(m.asDict().find("content"));
    msg.toolCallId = field(m, "tool_call_id");
    msg.name = field(m, "name");
    if (const Value* calls = m.asDict().find("tool_calls"); calls && !calls->isNone()) {
      JITLLM_REQUIRE(calls->isList(), "chat JSON: \"tool_calls\" must be an array");
      for (const auto& c : calls->asList().items) {
        JITLLM_REQUIRE(c.isDict(), "chat JSON: each tool call must be an object");
        const Value* function = c.asDict().find("function");
        JITLLM_REQUIRE(function && function->isDict(), "chat JSON: a tool call needs a \"function\" object");
        ToolCall call{field(c, "id"), field(*function, "name"), ""};
        const Value* arguments = function->asDict().find("arguments");
        if (arguments && arguments->isString()) {
          call.arguments = arguments->asString();
        } else if (arguments && !arguments->isNone()) {
          call.arguments = jinja::toJson(*arguments, {});
        }
        msg.toolCalls.push_back(std::move(call));
      }
    }
    out.messages.push_back(std::move(msg));
  }
  return out;
}

}  // namespace jitllm::runtime
