// The chat API the daemon and tools call (engine/chat/chat_template.h): the ChatML fallback,
// family names for display, BOS handling, and errors that name the model and template line.
#include "engine/chat/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "engine/chat/chat_messages_json.h"

namespace jitllm::runtime {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};

std::string errorOf(const ChatTemplate& t, const std::vector<ChatMessage>& m) {
  try {
    t.render(m);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, ModelsWithoutATemplateGetChatMl) {
  ChatTemplate t = ChatTemplate::fromModel(std::nullopt, "<s>", "</s>", "tiny", true);
  EXPECT_EQ(t.family(), "chatml");
  EXPECT_EQ(renderChat(t, kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(renderChat(t, kConversation, /*addGenerationPrompt=*/false).find("<|im_start|>assistant\n", 80),
            std::string::npos);
}

TEST(ChatTemplate, FamiliesAreRecognisedForDisplay) {
  EXPECT_EQ(chatTemplateFamily("{{ '<|start_header_id|>' + role }}"), "llama3");
  EXPECT_EQ(chatTemplateFamily("{{'<|im_start|>' + message['role']}}"), "chatml");
  EXPECT_EQ(chatTemplateFamily("{{ '<start_of_turn>' + role }}"), "gemma");
  EXPECT_EQ(chatTemplateFamily("{{ '<|user|>' }}"), "phi3");
  EXPECT_EQ(chatTemplateFamily("{{ '<|start_of_role|>' }}"), "granite");
  EXPECT_EQ(chatTemplateFamily("{{ '[INST] ' + content + ' [/INST]' }}"), "mistral");
  EXPECT_EQ(chatTemplateFamily("{{ 'hello' }}"), "jinja");
  EXPECT_EQ(chatTemplateFamily(std::nullopt), "chatml");
  EXPECT_EQ(ChatTemplate::fromModel("{% if %}", "", "", "m", false).family(), "invalid");
}

TEST(ChatTemplate, ABosTheTokenizerAddsIsNotWrittenTwice) {
  const std::string llama = "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}";
  EXPECT_EQ(ChatTemplate::fromModel(llama, "<s>", "</s>", "m", /*tokenizerAddsBos=*/true).render(kConversation),
            "[Be brief.][Hi][Hello][Bye]");
  EXPECT_EQ(ChatTemplate::fromModel(llama, "<s>", "</s>", "m", /*tokenizerAddsBos=*/false).render(kConversation),
            "<s>[Be brief.][Hi][Hello][Bye]");
}

TEST(ChatTemplate, ATemplateThatDoesNotParseFailsAtRenderNamingModelAndLine) {
  ChatTemplate t =
      ChatTemplate::fromModel("line one\n{% for m in messages %}\n{{ m.content }}\n", "", "", "my-model", false);
  std::string e = errorOf(t, kConversation);
  EXPECT_NE(e.find("model my-model"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("never closed"), std::string::npos) << e;
}

TEST(ChatTemplate, RaiseExceptionIsAnErrorNamingTheLine) {
  ChatTemplate t = ChatTemplate::fromModel(
      "{% if messages[0].role == 'system' %}\n  {{ raise_exception('System role not supported') }}\n{% endif %}", "",
      "", "gemma-like", false);
  std::string e = errorOf(t, kConversation);
  EXPECT_NE(e.find("model gemma-like: chat template line 2: "), std::string::npos) << e;
  EXPECT_NE(e.find("System role not supported"), std::string::npos) << e;
}

TEST(ChatTemplate, UnsupportedTagsAreRefusedNotSkipped) {
  for (const char* src : {"{% include 'x' %}", "{% extends 'base' %}", "{% call m() %}{% endcall %}",
                          "{% for x in y recursive %}{% endfor %}", "{% import 'm' as m %}"}) {
    ChatTemplate t = ChatTemplate::fromModel(std::string(src), "", "", "m", false);
    EXPECT_EQ(t.family(), "invalid") << src;
    EXPECT_THROW(t.render(kConversation), Error) << src;
  }
}

TEST(ChatTemplate, RolesAndEmptyConversationsAreChecked) {
  ChatTemplate t = ChatTemplate::chatMl();
  EXPECT_THROW(t.render({}), Error);
  EXPECT_THROW(t.render({{"narrator", "x"}}), Error);
  EXPECT_NO_THROW(t.render({{"tool", "{}"}}));
}

TEST(ChatTemplate, ToolCallsReachTheTemplateWithParsedArguments) {
  ChatTemplate t = ChatTemplate::fromModel(
      "{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.name }}:{{ c.function.arguments | tojson }}"
      "/{{ c.function.arguments.city }}{% endfor %}{% endfor %}|{{ tools | map(attribute='function.name') | list }}",
      "", "", "m", false);
  ChatConversation conv = parseChatConversation(R"({"messages": [
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
        "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}],
      "tools": [{"type": "function", "function": {"name": "weather"}}]})");
  ChatRenderOptions options;
  options.toolsJson = conv.toolsJson;
  EXPECT_EQ(t.render(conv.messages, options), "weather:{\"city\": \"Paris\"}/Paris|['weather']");
}

TEST(ChatConversationJson, ReadsOpenAiShapes) {
  ChatConversation c = parseChatConversation(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
          {"role": "tool", "tool_call_id": "7", "name": "f", "content": "42"}])");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[0].content, "ab");
  EXPECT_EQ(c.messages[1].toolCallId, "7");
  EXPECT_EQ(c.toolsJson, "");
  EXPECT_THROW(parseChatConversation("{\"messages\": 3}"), Error);
  EXPECT_THROW(parseChatConversation("[{\"role\": \"user\", \"content\": 5}]"), Error);
}

}  // namespace
}  // namespace jitllm::runtime
