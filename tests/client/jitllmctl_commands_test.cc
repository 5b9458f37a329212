// jitllmctl's commands, run in-process against the scripted stand-in daemon: what each prints,
// as text and as --json, and the exit status.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "ctl/commands.h"
#include "fake_daemon.h"
#include "mini_json.h"
#include "process_runner.h"

namespace jitllm::ctl {
namespace {

using testing::FakeDaemon;
using testing::FakeDaemonRecord;
using testing::JsonReader;
using testing::TempDir;

struct CtlResult {
  int exitCode;
  std::string out;
  std::string err;
};

class JitllmctlCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<FakeDaemon>(socket(), FakeDaemon::Options{});
    model_ = dir_.path() + "/stories.gguf";
    std::ofstream(model_, std::ios::binary) << std::string("GGUF\x03\0\0\0", 8);
  }

  std::string socket() const { return dir_.path() + "/jitllmd.sock"; }

  CtlResult ctl(std::vector<std::string> args, const std::string& stdinText = "", Terminal terminal = {}) {
    args.push_back("--socket");
    args.push_back(socket());
    std::istringstream in(stdinText);
    std::ostringstream out, err;
    const int rc = runJitllmctl(args, in, out, err, terminal);
    return {rc, out.str(), err.str()};
  }

  void load(const std::string& name = "stories") { ASSERT_EQ(ctl({"load", model_, "--name", name}).exitCode, 0); }

  TempDir dir_;
  std::unique_ptr<FakeDaemon> daemon_;
  std::string model_;
};

TEST_F(JitllmctlCommands, StatusSaysTheDaemonRunsWithItsVersionAndWhatItHolds) {
  load();
  const auto r = ctl({"status"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "jitllmd 0.1.0 (protocol 1) is running at " + socket() +
                       "\nbuild: fake daemon for tests\n1 device, 1 model, 0 sessions\n");
  const auto j = JsonReader::parse(ctl({"status", "--json"}).out);
  EXPECT_TRUE(j["running"].boolean);
  EXPECT_EQ(j["daemon"]["protocol"].number, 1);
  EXPECT_EQ(j["models"].number, 1);
}

TEST_F(JitllmctlCommands, DevicesListsEachDeviceAndJsonWritesUnknownTelemetryAsNull) {
  const auto r = ctl({"devices"});
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_NE(r.out.find("cpu:0"), std::string::npos);
  EXPECT_NE(r.out.find("8.0 GiB"), std::string::npos) << r.out;
  const auto j = JsonReader::parse(ctl({"--json", "devices"}).out);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["name"].string, "Fake \"CPU\"");
  EXPECT_EQ(d["telemetry"]["temperatureC"].type, testing::JsonValue::Type::kNull);
  EXPECT_EQ(d["telemetry"]["utilization"].number, 0.25);
}

TEST_F(JitllmctlCommands, LoadPassesTheFileAndPrintsTheModel) {
  const auto r = ctl({"load", model_, "--name", "stories"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out.rfind("loaded stories (llama, 5 layers", 0), 0u) << r.out;
  EXPECT_EQ(daemon_->record().fileMagics, std::vector<std::string>{"GGUF"});
  const auto j = JsonReader::parse(ctl({"load", model_, "--name", "second", "--json"}).out);
  EXPECT_EQ(j["model"]["name"].string, "second");
  EXPECT_EQ(j["model"]["placement"][0]["device"].string, "cpu:0");
}

TEST_F(JitllmctlCommands, LoadDrawsAProgressBarOnlyOnATerminal) {
  const auto plain = ctl({"load", model_, "--name", "a"});
  EXPECT_EQ(plain.err, "");
  const auto tty = ctl({"load", model_, "--name", "b"}, "", Terminal{.stderrIsTty = true});
  EXPECT_NE(tty.err.find("[####"), std::string::npos) << tty.err;
  EXPECT_NE(tty.err.find("100%"), std::string::npos) << tty.err;
}

TEST_F(JitllmctlCommands, LoadOfSomethingThatIsNotAModelExits1WithTheDaemonsMessage) {
  const std::string text = dir_.path() + "/notes.txt";
  std::ofstream(text) << "hello";
  const auto r = ctl({"load", text});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err, "jitllmctl: the file is not a GGUF model (bad magic)\n");
}

TEST_F(JitllmctlCommands, PsShowsModelsTheirPlacementAndRunningSessions) {
  EXPECT_EQ(ctl({"ps"}).out, "no models loaded (load one with `jitllmctl load FILE`)\n");
  load();
  // A generation in progress on another client, so that ps has a session to show.
  auto slow = std::make_unique<FakeDaemon>(dir_.path() + "/slow.sock", FakeDaemon::Options{.tokenDelay = std::chrono::milliseconds(20)});
  std::thread generating([&] {
    std::istringstream in;
    std::ostringstream out, err;
    const std::vector<std::string> loadArgs = {"load", model_, "--socket", dir_.path() + "/slow.sock"};
    runJitllmctl(loadArgs, in, out, err, {});
    const std::vector<std::string> runArgs = {"run", "model", "go", "-n", "25", "--socket", dir_.path() + "/slow.sock"};
    runJitllmctl(runArgs, in, out, err, {});
  });
  bool sawSession = false;
  for (int i = 0; i < 200 && !sawSession; i++) {
    std::istringstream in;
    std::ostringstream out, err;
    const std::vector<std::string> psArgs = {"ps", "--socket", dir_.path() + "/slow.sock"};
    runJitllmctl(psArgs, in, out, err, {});
    sawSession = out.str().find("\nSESSION ") != std::string::npos;  // the sessions table, not the SESSIONS column
    if (sawSession) {
      EXPECT_NE(out.str().find("decode"), std::string::npos) << out.str();
      EXPECT_NE(out.str().find("token_embd..output"), std::string::npos) << out.str();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  generating.join();
  EXPECT_TRUE(sawSession);
  const auto j = JsonReader::parse(ctl({"ps", "--json"}).out);
  EXPECT_EQ(j["models"][0]["name"].string, "stories");
  EXPECT_EQ(j["models"][0]["sessions"].array.size(), 0u);
}

TEST_F(JitllmctlCommands, RunStreamsTheTextAndEndsTheLine) {
  load();
  const auto r = ctl({"run", "stories", "Once upon a time", "-n", "3", "--temperature", "0.5", "--seed", "9"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "t0 t1 t2 \n");
  EXPECT_EQ(r.err, "");  // stats only on a terminal
  const auto rec = daemon_->record();
  EXPECT_EQ(rec.prompts.back(), "Once upon a time");
  EXPECT_EQ(rec.lastMaxTokens, 3u);
  EXPECT_FLOAT_EQ(rec.lastTemperature, 0.5f);
  EXPECT_EQ(rec.lastSeed, 9u);
}

TEST_F(JitllmctlCommands, RunJsonIsOneObjectWithTokensTextAndStats) {
  load();
  const auto r = ctl({"--json", "run", "stories", "hi", "-n", "2"});
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line, one object: " << r.out;
  const auto j = JsonReader::parse(r.out);
  EXPECT_EQ(j["tokens"].ints(), (std::vector<int32_t>{100, 101}));
  EXPECT_EQ(j["text"].string, "t0 t1 ");
  EXPECT_EQ(j["stats"]["generatedTokens"].number, 2);
  EXPECT_EQ(j["stats"]["stopReason"].string, "maxTokens");
  EXPECT_EQ(j["stats"]["timeToFirstTokenMs"].number, 1.5);
  EXPECT_FALSE(j["cancelled"].boolean);
}

TEST_F(JitllmctlCommands, RunOfAnUnknownModelExits1WithTheDaemonsMessage) {
  const auto r = ctl({"run", "nosuch", "hi"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err, "jitllmctl: no model named 'nosuch' is loaded\n");
  const auto j = ctl({"run", "overloaded", "hi", "--json"});
  EXPECT_EQ(JsonReader::parse(j.out)["error"]["kind"].string, "overloaded");
}

TEST_F(JitllmctlCommands, ChatKeepsTheHistoryAcrossStdinLines) {
  load();
  const auto r = ctl({"chat", "stories", "--system", "be kind"}, "hello\n\nhow are you?\n");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "you said: hello\nyou said: how are you?\n");
  const auto rec = daemon_->record();
  // system + user, then system + user + assistant + user: the empty line is no turn.
  EXPECT_EQ(rec.chatHistorySizes, (std::vector<size_t>{2, 4}));
  EXPECT_EQ(rec.chatLastUser, (std::vector<std::string>{"hello", "how are you?"}));
}

TEST_F(JitllmctlCommands, ChatJsonPrintsOneObjectPerReply) {
  load();
  const auto r = ctl({"chat", "stories", "--json"}, "a\nb\n");
  EXPECT_EQ(r.exitCode, 0);
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> contents;
  while (std::getline(lines, line)) contents.push_back(JsonReader::parse(line)["content"].string);
  EXPECT_EQ(contents, (std::vector<std::string>{"you said: a", "you said: b"}));
}

TEST_F(JitllmctlCommands, ChatFromAScriptStopsAtTheFirstError) {
  const auto r = ctl({"chat", "nosuch"}, "hello\nagain\n");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err, "jitllmctl: no model named 'nosuch' is loaded\n");
}

TEST_F(JitllmctlCommands, UnloadRemovesTheModel) {
  load();
  const auto r = ctl({"unload", "stories"});
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_EQ(r.out, "unloaded stories\n");
  const auto again = ctl({"unload", "stories", "--json"});
  EXPECT_EQ(again.exitCode, 1);
  EXPECT_EQ(JsonReader::parse(again.out)["error"]["message"].string, "no model named 'stories' is loaded");
}

TEST_F(JitllmctlCommands, EventsPrintsTheRecentOnesOnePerLine) {
  load();
  const auto r = ctl({"events"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("daemon.started: fake daemon started\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.loaded model=stories: loaded stories from fd:"), std::string::npos) << r.out;
  const auto j = JsonReader::parse(ctl({"events", "--json"}).out);
  ASSERT_EQ(j["events"].array.size(), 2u);
  EXPECT_EQ(j["events"][1]["kind"].string, "model");
  EXPECT_EQ(j["events"][1]["what"].string, "loaded");
}

TEST_F(JitllmctlCommands, CancelPassesTheSessionAndReportsARefusal) {
  EXPECT_EQ(ctl({"cancel", "42"}).out, "cancelled session 42\n");
  EXPECT_EQ(daemon_->record().cancelledSessions, std::vector<uint64_t>{42});
  const auto r = ctl({"cancel", "999"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err, "jitllmctl: no session 999 is yours (see `jitllmctl ps`)\n");
}

}  // namespace
}  // namespace jitllm::ctl
