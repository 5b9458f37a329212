// jitllmctl's command line: what parses, what is a usage error (exit 2), and the command table.
#include "ctl/command_line.h"

#include <gtest/gtest.h>

#include <sstream>

#include "ctl/commands.h"

namespace jitllm::ctl {
namespace {

ParsedCommandLine parse(std::vector<std::string> args) { return parseCommandLine(args, commandTable()); }

std::string usageErrorOf(std::vector<std::string> args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no usage error)";
}

TEST(CommandLine, EveryCommandOfTheDaemonIssueIsInTheTableWithAHandler) {
  for (const char* name : {"status", "devices", "ps", "load", "unload", "run", "chat", "events", "cancel", "migrate",
                           "pin", "unpin", "policy"}) {
    bool found = false;
    for (const auto& c : commandTable()) {
      if (c.name == name) found = c.run != nullptr && c.reservedFor.empty();
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(CommandLine, GlobalOptionsAreAcceptedBeforeAndAfterTheCommand) {
  auto a = parse({"--json", "--socket", "/tmp/s.sock", "ps"});
  EXPECT_TRUE(a.json);
  EXPECT_EQ(a.socket, "/tmp/s.sock");
  EXPECT_EQ(a.command->name, "ps");
  auto b = parse({"ps", "--socket=/tmp/t.sock", "--json"});
  EXPECT_TRUE(b.json);
  EXPECT_EQ(b.socket, "/tmp/t.sock");
}

TEST(CommandLine, RunTakesItsArgumentsAndOptionsInAnyOrder) {
  auto a = parse({"run", "-n", "5", "stories", "--temperature", "0.5", "Once upon a time", "--seed=7", "--stop", "a",
                  "--stop", "b"});
  ASSERT_EQ(a.arguments.size(), 2u);
  EXPECT_EQ(a.arguments[0], "stories");
  EXPECT_EQ(a.arguments[1], "Once upon a time");
  EXPECT_EQ(a.number<uint32_t>("-n", 0), 5u);
  EXPECT_FLOAT_EQ(a.number<float>("--temperature", 0), 0.5f);
  EXPECT_EQ(a.number<uint64_t>("--seed", 0), 7u);
  EXPECT_EQ(a.values("--stop"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.number<uint32_t>("--ctx", 42), 42u);  // absent: the fallback
}

TEST(CommandLine, MigrateTakesNameLayersDeviceAndItsFlags) {
  auto a = parse({"migrate", "stories:20-output", "cpu:1", "--no-wait", "--no-precopy", "--force"});
  EXPECT_EQ(a.arguments, (std::vector<std::string>{"stories:20-output", "cpu:1"}));
  EXPECT_TRUE(a.has("--no-wait"));
  EXPECT_TRUE(a.has("--no-precopy"));
  EXPECT_TRUE(a.has("--force"));
  EXPECT_FALSE(parse({"migrate", "s", "cpu:1"}).has("--force"));
  EXPECT_TRUE(parse({"ps", "-l", "stories"}).has("-l"));
  EXPECT_EQ(parse({"ps", "-l", "stories"}).arguments, std::vector<std::string>{"stories"});
  EXPECT_TRUE(parse({"ps", "-l"}).arguments.empty());
}

TEST(CommandLine, NameAndLayersSplitAtTheLastColon) {
  auto split = [](std::string_view arg) {
    const ModelLayers m = parseModelLayers(arg, "migrate");
    return m.model + "|" + m.layers;
  };
  EXPECT_EQ(split("stories"), "stories|");
  EXPECT_EQ(split("stories:3"), "stories|3");
  EXPECT_EQ(split("stories:token_embd-output"), "stories|token_embd-output");
  EXPECT_EQ(split("stories:"), "stories|");
  EXPECT_EQ(split("llama3:8b:0-5"), "llama3:8b|0-5");
  EXPECT_EQ(split("llama3:8b:"), "llama3:8b|");
  EXPECT_THROW(parseModelLayers(":3", "migrate"), UsageError);
  EXPECT_THROW(parseModelLayers("", "pin"), UsageError);
  try {
    parseModelLayers(":0-5", "pin");
  } catch (const UsageError& e) {
    EXPECT_EQ(e.command(), "pin");  // its usage is shown
    EXPECT_NE(std::string(e.what()).find("':0-5' names no model"), std::string::npos) << e.what();
  }
}

TEST(CommandLine, AMissingArgumentIsNamed) {
  EXPECT_EQ(usageErrorOf({"migrate", "stories"}), "migrate needs NAME[:LAYERS] DEVICE (DEVICE is missing)");
  EXPECT_EQ(usageErrorOf({"migrate"}), "migrate needs NAME[:LAYERS] DEVICE");
  EXPECT_EQ(usageErrorOf({"pin", "stories:3"}), "pin needs NAME[:LAYERS] DEVICE (DEVICE is missing)");
  EXPECT_EQ(usageErrorOf({"unpin"}), "unpin needs NAME[:LAYERS]");
}

TEST(CommandLine, DoubleDashLetsAPromptStartWithADash) {
  auto a = parse({"run", "stories", "--", "-5 degrees"});
  EXPECT_EQ(a.arguments[1], "-5 degrees");
}

TEST(CommandLine, MistakesAreUsageErrorsThatSayWhatIsWrong) {
  EXPECT_NE(usageErrorOf({"frobnicate"}).find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"ps", "--all"}).find("unknown option --all for 'ps'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-n", "3", "run"}).find("options of a command go after its name"), std::string::npos);
  EXPECT_NE(usageErrorOf({"run", "m", "p", "-n"}).find("-n needs a value"), std::string::npos);
  EXPECT_NE(usageErrorOf({"run", "m"}).find("run needs NAME PROMPT"), std::string::npos);
  EXPECT_NE(usageErrorOf({"run", "m", "two", "words"}).find("too many arguments"), std::string::npos);
  EXPECT_NE(usageErrorOf({"load", "f", "--name", "a", "--name", "b"}).find("--name given twice"), std::string::npos);
  EXPECT_NE(usageErrorOf({"ps", "--json=yes"}).find("--json takes no value"), std::string::npos);
  EXPECT_NE(usageErrorOf({"status", "--socket"}).find("--socket needs a value"), std::string::npos);
}

TEST(CommandLine, NumbersAreParsedStrictly) {
  auto a = parse({"run", "m", "p", "-n", "5x"});
  EXPECT_THROW(a.number<uint32_t>("-n", 0), UsageError);
  auto b = parse({"run", "m", "p", "-n", "-1"});
  EXPECT_THROW(b.number<uint32_t>("-n", 0), UsageError);
  auto c = parse({"run", "m", "p", "-n", "99999999999"});
  EXPECT_THROW(c.number<uint32_t>("-n", 0), UsageError);
  auto d = parse({"run", "m", "p", "--temperature", "hot"});
  EXPECT_THROW(d.number<float>("--temperature", 0), UsageError);
}

TEST(CommandLine, HelpAndVersionNeedNoCommandAndSkipArgumentChecks) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"--version"}).version);
  auto a = parse({"run", "--help"});
  EXPECT_TRUE(a.help);
  EXPECT_EQ(a.command->name, "run");
}

int runCtl(std::vector<std::string> args, std::string* out = nullptr, std::string* err = nullptr) {
  std::istringstream in;
  std::ostringstream o, e;
  const int rc = runJitllmctl(args, in, o, e, Terminal{});
  if (out) *out = o.str();
  if (err) *err = e.str();
  return rc;
}

TEST(Jitllmctl, UsageErrorsExitWith2AndShowTheCommandsUsage) {
  std::string err;
  EXPECT_EQ(runCtl({"run", "stories"}, nullptr, &err), 2);
  EXPECT_NE(err.find("usage: jitllmctl run NAME PROMPT"), std::string::npos) << err;
  EXPECT_EQ(runCtl({}, nullptr, &err), 2);
  EXPECT_NE(err.find("no command given"), std::string::npos);
  EXPECT_EQ(runCtl({"cancel", "abc"}, nullptr, &err), 2);
  EXPECT_NE(err.find("SESSION: 'abc' is not a whole number"), std::string::npos) << err;
  EXPECT_EQ(runCtl({"load", "f.gguf", "--kv", "q8"}, nullptr, &err), 2);
  EXPECT_EQ(runCtl({"run", "m", "p", "--top-p", "0"}, nullptr, &err), 2);
}

TEST(Jitllmctl, EveryCommandHasHelpThatExitsZero) {
  for (const auto& c : commandTable()) {
    if (!c.reservedFor.empty()) continue;
    std::string out;
    EXPECT_EQ(runCtl({std::string(c.name), "--help"}, &out), 0) << c.name;
    EXPECT_NE(out.find("usage: jitllmctl " + std::string(c.name)), std::string::npos) << out;
    EXPECT_NE(out.find("--json"), std::string::npos) << c.name << " must document --json";
  }
}

TEST(Jitllmctl, VersionPrintsTheClientVersionAndProtocolWithoutADaemon) {
  std::string out;
  EXPECT_EQ(runCtl({"--version"}, &out), 0);
  EXPECT_EQ(out, std::string("jitllmctl ") + client::libraryVersion() + " (protocol " +
                     std::to_string(client::kProtocolVersion) + ")\n");
  EXPECT_EQ(runCtl({"--version", "--json"}, &out), 0);
  EXPECT_EQ(out, std::string(R"({"version":")") + client::libraryVersion() + R"(","protocol":)" +
                     std::to_string(client::kProtocolVersion) + "}" + "\n");
}

}  // namespace
}  // namespace jitllm::ctl
