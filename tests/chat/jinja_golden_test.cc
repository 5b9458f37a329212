// Every committed real template (templates/*.jinja, README.md says whence) rendered for every
// conversation in conversations.json, with and without the generation prompt, must equal what
// Python's jinja2 rendered (goldens/*.json, by gen_goldens.py) byte for byte - and where jinja2
// failed (raise_exception, a None used as text, ...), we must fail too, never print a prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/chat/chat_messages_json.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/jinja/json.h"

namespace jitllm {
namespace {

namespace fs = std::filesystem;
using jinja::Value;

const fs::path kDir = JITLLM_CHAT_TEST_DIR;

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> goldenNames() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir / "goldens")) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

const Value& get(const Value& dict, const char* key) {
  const Value* v = dict.asDict().find(key);
  if (!v) throw std::runtime_error(std::string("golden lacks ") + key);
  return *v;
}

class RealTemplate : public testing::TestWithParam<std::string> {};

TEST_P(RealTemplate, RendersAsJinja2Does) {
  const std::string name = GetParam();
  Value golden = jinja::parseJson(readFile(kDir / "goldens" / (name + ".json")));
  Value spec = jinja::parseJson(readFile(kDir / "conversations.json"));
  std::string source = readFile(kDir / "templates" / get(golden, "template").asString());
  auto tmpl = runtime::ChatTemplate::fromModel(source, get(golden, "bos_token").asString(),
                                               get(golden, "eos_token").asString(), name, false);
  std::tm now{};
  std::istringstream(get(golden, "now").asString()) >> std::get_time(&now, "%Y-%m-%dT%H:%M:%S");
  for (const Value& c : get(golden, "cases").asList().items) {
    const std::string conv = get(c, "conversation").asString();
    const bool addGenerationPrompt = get(c, "add_generation_prompt").asBool();
    Value doc = Value::dict({{"messages", get(get(spec, "conversations"), conv.c_str())}});
    std::vector<std::pair<std::string, Value>> entries = doc.asDict().entries;
    if (conv == "tools") entries.emplace_back("tools", get(spec, "tools"));
    runtime::ChatConversation conversation = runtime::parseChatConversation(jinja::toJson(Value::dict(entries), {}));
    runtime::ChatRenderOptions options;
    options.addGenerationPrompt = addGenerationPrompt;
    options.toolsJson = conversation.toolsJson;
    options.now = timegm(&now);
    const std::string what = name + " / " + conv + (addGenerationPrompt ? " / generation prompt" : " / no prompt");
    if (const Value* expected = c.asDict().find("output")) {
      std::string got;
      try {
        got = tmpl.render(conversation.messages, options);
      } catch (const Error& e) {
        ADD_FAILURE() << what << ": jinja2 renders it, we failed: " << e.what();
        continue;
      }
      EXPECT_EQ(got, expected->asString()) << what;
    } else {
      try {
        std::string got = tmpl.render(conversation.messages, options);
        ADD_FAILURE() << what << ": jinja2 fails (" << get(c, "error").asString() << "), we rendered:\n" << got;
      } catch (const Error& e) {
        // The message names the model and the template line.
        EXPECT_NE(std::string(e.what()).find("model " + name + ": chat template line "), std::string::npos) << e.what();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, RealTemplate, testing::ValuesIn(goldenNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return !std::isalnum((unsigned char)c); }, '_');
                           return n;
                         });

TEST(RealTemplates, AtLeastTwentyFiveAreCovered) { EXPECT_GE(goldenNames().size(), 25u); }

}  // namespace
}  // namespace jitllm
