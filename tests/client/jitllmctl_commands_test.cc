// jitllmctl's commands, run in-process against the scripted stand-in daemon: what each prints,
// as text and as --json, and the exit status.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
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
  EXPECT_EQ(r.out, "jitllmd 0.1.0 (protocol " + std::to_string(client::kProtocolVersion) + ") is running at " +
                       socket() + "\nbuild: fake daemon for tests\n1 device, 1 model, 0 sessions\n");
  const auto j = JsonReader::parse(ctl({"status", "--json"}).out);
  EXPECT_TRUE(j["running"].boolean);
  EXPECT_EQ(j["daemon"]["protocol"].number, client::kProtocolVersion);
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
  EXPECT_EQ(r.out.rfind("loaded stories (llama, llama2 template, 5 layers", 0), 0u) << r.out;
  EXPECT_EQ(daemon_->record().fileMagics, std::vector<std::string>{"GGUF"});
  const auto j = JsonReader::parse(ctl({"load", model_, "--name", "second", "--json"}).out);
  EXPECT_EQ(j["model"]["name"].string, "second");
  EXPECT_EQ(j["model"]["placement"][0]["device"].string, "cpu:0");
}

TEST_F(JitllmctlCommands, LoadPassesAMaxVramCapInBytesAndRefusesABadOne) {
  EXPECT_EQ(ctl({"load", model_, "--name", "capped", "--max-vram", "2G"}).exitCode, 0);
  EXPECT_EQ(ctl({"load", model_, "--name", "free"}).exitCode, 0);
  EXPECT_EQ(daemon_->record().loadMaxDeviceBytes, (std::vector<uint64_t>{uint64_t(2) << 30, 0}));
  const auto bad = ctl({"load", model_, "--name", "x", "--max-vram", "lots"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--max-vram takes a size such as 512M or 2G"), std::string::npos) << bad.err;
  EXPECT_EQ(daemon_->record().loadMaxDeviceBytes.size(), 2u) << "a refused option sends nothing";
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
  auto slow = std::make_unique<FakeDaemon>(dir_.path() + "/slow.sock",
                                           FakeDaemon::Options{.tokenDelay = std::chrono::milliseconds(20)});
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
      // The architecture and the chat template's family, each in its column.
      EXPECT_NE(out.str().find("ARCH   TEMPLATE"), std::string::npos) << out.str();
      EXPECT_NE(out.str().find("llama  llama2"), std::string::npos) << out.str();
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
  EXPECT_EQ(rec.lastTier, "") << "no --tier: the daemon picks the caller's default";
  EXPECT_EQ(ctl({"run", "stories", "x", "-n", "1", "--tier", "batch"}).exitCode, 0);
  EXPECT_EQ(daemon_->record().lastTier, "batch");
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

TEST_F(JitllmctlCommands, MigratePassesTheModelLayersDeviceAndFlagsToTheDaemon) {
  load();
  EXPECT_EQ(ctl({"migrate", "stories:20-output", "cpu:1", "--no-precopy", "--force"}).exitCode, 1);  // no blk.20
  ASSERT_EQ(ctl({"migrate", "stories:2-output", "cpu:1", "--no-precopy", "--force"}).exitCode, 0);
  ASSERT_EQ(ctl({"migrate", "stories", "cpu:0"}).exitCode, 0);
  ASSERT_EQ(ctl({"migrate", "stories:embd", "cpu:1", "--no-wait"}).exitCode, 0);
  const auto calls = daemon_->record().migrations;
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].layers, "20-output");  // passed through as typed: the daemon parses it
  EXPECT_EQ(calls[1].model, "stories");
  EXPECT_EQ(calls[1].layers, "2-output");
  EXPECT_EQ(calls[1].device, "cpu:1");
  EXPECT_TRUE(calls[1].wait);
  EXPECT_FALSE(calls[1].precopy);
  EXPECT_TRUE(calls[1].force);
  EXPECT_EQ(calls[2].layers, "");  // NAME alone: every unit
  EXPECT_EQ(calls[2].device, "cpu:0");
  EXPECT_TRUE(calls[2].wait);
  EXPECT_TRUE(calls[2].precopy);
  EXPECT_FALSE(calls[2].force);
  EXPECT_EQ(calls[3].layers, "embd");
  EXPECT_FALSE(calls[3].wait);
}

TEST_F(JitllmctlCommands, AModelNameWithAColonIsWrittenWithATrailingColon) {
  load("llama3:8b");
  ASSERT_EQ(ctl({"migrate", "llama3:8b:", "cpu:1"}).exitCode, 0);
  ASSERT_EQ(ctl({"migrate", "llama3:8b:3", "cpu:0"}).exitCode, 0);
  const auto calls = daemon_->record().migrations;
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].model, "llama3:8b");
  EXPECT_EQ(calls[0].layers, "");
  EXPECT_EQ(calls[1].model, "llama3:8b");
  EXPECT_EQ(calls[1].layers, "3");
}

TEST_F(JitllmctlCommands, MigratePrintsWhatMovedThenEveryNumberAsScriptsGrepThem) {
  load();
  const auto r = ctl({"migrate", "stories", "cpu:1"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out,
            "migrated stories:token_embd-output (7 units) cpu:0 -> cpu:1, 896.0 KiB of weights\n"
            "pause_ms 0.412  prepare_ms 12.3  bytes_precopied 524288  bytes_in_pause 8192  recomputed_tokens 0  "
            "sessions 3\n");
  EXPECT_EQ(r.err, "");
  const auto one = ctl({"migrate", "stories:3", "cpu:0", "--no-precopy"});
  EXPECT_EQ(one.out.substr(0, one.out.find('\n')),
            "migrated stories:blk.3 (1 unit) cpu:1 -> cpu:0, 128.0 KiB of weights");
  EXPECT_NE(one.out.find("  bytes_precopied 0  bytes_in_pause 532480  "), std::string::npos) << one.out;
  const auto none = ctl({"migrate", "stories:3", "cpu:0"});
  EXPECT_EQ(none.exitCode, 0);
  EXPECT_EQ(none.out.substr(0, none.out.find('\n')), "nothing to migrate: stories:3 is on cpu:0 already");
  EXPECT_NE(none.out.find("\npause_ms "), std::string::npos) << none.out;
}

TEST_F(JitllmctlCommands, MigrateJsonIsOneObjectWithEveryStatInSnakeCase) {
  load();
  const auto r = ctl({"--json", "migrate", "stories:0-1", "cpu:1"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const auto j = JsonReader::parse(r.out);
  EXPECT_EQ(j.object.size(), 15u) << "one key per MigrationStats field: " << r.out;
  EXPECT_EQ(j["id"].number, 1);
  EXPECT_EQ(j["model"].string, "stories");
  EXPECT_EQ(j["first_name"].string, "blk.0");
  EXPECT_EQ(j["last_name"].string, "blk.1");
  EXPECT_EQ(j["from"].string, "cpu:0");
  EXPECT_EQ(j["to"].string, "cpu:1");
  EXPECT_EQ(j["units"].number, 2);
  EXPECT_TRUE(j["committed"].boolean);
  EXPECT_EQ(j["prepare_ms"].number, 12.34);
  EXPECT_EQ(j["pause_ms"].number, 0.412);
  EXPECT_EQ(j["bytes_precopied"].number, 524288);
  EXPECT_EQ(j["bytes_in_pause"].number, 8192);
  EXPECT_EQ(j["weight_bytes"].number, 2 * 131072);
  EXPECT_EQ(j["recomputed_tokens"].number, 0);
  EXPECT_EQ(j["sessions"].number, 3);
}

TEST_F(JitllmctlCommands, MigrateWithoutWaitingSaysItStartedAndWhereItsOutcomeAppears) {
  load();
  const auto r = ctl({"migrate", "stories:1-2", "cpu:1", "--no-wait"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out,
            "migration 1 started: stories:blk.1-blk.2 (2 units) cpu:0 -> cpu:1; its outcome will appear in "
            "`jitllmctl events` (migration.committed or migration.failed)\n");
  const auto j = JsonReader::parse(ctl({"--json", "ps", "stories"}).out);
  EXPECT_EQ(j["models"][0]["migration"].string, "migration 1: blk.1-blk.2 cpu:0 -> cpu:1, preparing");
  // The fake never finishes it: the next one is refused, and says why.
  const auto again = ctl({"migrate", "stories", "cpu:1"});
  EXPECT_EQ(again.exitCode, 1);
  EXPECT_EQ(again.err,
            "jitllmctl: a migration of 'stories' is already running (migration 1: blk.1-blk.2 cpu:0 -> cpu:1, "
            "preparing): wait for its outcome in `jitllmctl events`\n");
}

TEST_F(JitllmctlCommands, PinMovesThenPinsAMigrateOfThePinnedRangeFailsAndUnpinLiftsIt) {
  load();
  const auto pinned = ctl({"pin", "stories:0-1", "cpu:1"});
  EXPECT_EQ(pinned.exitCode, 0) << pinned.err;
  EXPECT_EQ(pinned.out,
            "migrated stories:blk.0-blk.1 (2 units) cpu:0 -> cpu:1, 256.0 KiB of weights\n"
            "pause_ms 0.250  prepare_ms 3.5  bytes_precopied 0  bytes_in_pause 0  recomputed_tokens 0  sessions 0\n"
            "pinned stories:0-1 to cpu:1\n");
  EXPECT_EQ(ctl({"pin", "stories:0-1", "cpu:1"}).out, "pinned stories:0-1 to cpu:1\n");  // nothing to move
  ASSERT_EQ(daemon_->record().pins.size(), 2u);
  EXPECT_EQ(daemon_->record().pins[0].layers, "0-1");
  EXPECT_EQ(daemon_->record().pins[0].device, "cpu:1");

  const auto refused = ctl({"migrate", "stories:0", "cpu:0"});
  EXPECT_EQ(refused.exitCode, 1);
  EXPECT_EQ(refused.out, "");
  EXPECT_EQ(refused.err,
            "jitllmctl: blk.0 of 'stories' is pinned to cpu:1: unpin it (jitllmctl unpin stories:0) or pass --force\n");
  const auto json = ctl({"migrate", "stories:0", "cpu:0", "--json"});
  EXPECT_EQ(json.exitCode, 1);
  EXPECT_EQ(JsonReader::parse(json.out)["error"]["kind"].string, "failed");

  const auto unpinned = ctl({"unpin", "stories:0"});
  EXPECT_EQ(unpinned.exitCode, 0);
  EXPECT_EQ(unpinned.out, "unpinned stories:0\n");
  EXPECT_EQ(ctl({"unpin", "stories"}).out, "unpinned stories (every unit)\n");
  EXPECT_EQ(daemon_->record().unpins,
            (std::vector<std::pair<std::string, std::string>>{{"stories", "0"}, {"stories", ""}}));
  EXPECT_EQ(ctl({"migrate", "stories:0", "cpu:0"}).exitCode, 0);
}

TEST_F(JitllmctlCommands, PinAndUnpinJson) {
  load();
  const auto j = JsonReader::parse(ctl({"--json", "pin", "stories:3", "cpu:1"}).out);
  EXPECT_EQ(j["model"].string, "stories");
  EXPECT_EQ(j["layers"].string, "3");
  EXPECT_EQ(j["pinned"].string, "cpu:1");
  EXPECT_EQ(j["migration"]["units"].number, 1);
  EXPECT_EQ(j["migration"]["first_name"].string, "blk.3");
  const auto u = JsonReader::parse(ctl({"--json", "unpin", "stories:3"}).out);
  EXPECT_EQ(u["layers"].string, "3");
  EXPECT_TRUE(u["unpinned"].boolean);
}

TEST_F(JitllmctlCommands, PsLongShowsARowPerUnitWithStagingPinsAndTheMigration) {
  load();
  ASSERT_EQ(ctl({"pin", "stories:output", "cpu:1"}).exitCode, 0);
  ASSERT_EQ(ctl({"migrate", "stories:0-1", "cpu:1", "--no-wait"}).exitCode, 0);
  const auto r = ctl({"ps", "-l", "stories"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out,
            "stories (llama, llama2 template, 5 layers): cpu:0 token_embd..blk.4, cpu:1 output\n"
            "migration: migration 2: blk.0-blk.1 cpu:0 -> cpu:1, preparing\n"
            "UNIT  NAME        DEVICE  RESIDENCY               WEIGHTS    KERNELS  PINNED  KV PAGES  KV BYTES  "
            "SESSION:PAGES\n"
            "0     token_embd  cpu:0   file                    128.0 KiB  no       -       0         0 B       -\n"
            "1     blk.0       cpu:0   device staged on cpu:1  128.0 KiB  yes      -       0         0 B       -\n"
            "2     blk.1       cpu:0   device staged on cpu:1  128.0 KiB  yes      -       0         0 B       -\n"
            "3     blk.2       cpu:0   device                  128.0 KiB  yes      -       0         0 B       -\n"
            "4     blk.3       cpu:0   device                  128.0 KiB  yes      -       0         0 B       -\n"
            "5     blk.4       cpu:0   device                  128.0 KiB  yes      -       0         0 B       -\n"
            "6     output      cpu:1   device                  128.0 KiB  yes      cpu:1   0         0 B       -\n");
  EXPECT_EQ(ctl({"ps", "stories", "-l"}).out, r.out);  // -l before or after NAME
  const auto plain = ctl({"ps"});
  EXPECT_EQ(plain.out.find("UNIT"), std::string::npos) << "plain ps keeps its summary table: " << plain.out;
  EXPECT_NE(plain.out.find("cpu:0 token_embd..blk.4, cpu:1 output"), std::string::npos) << plain.out;
}

TEST_F(JitllmctlCommands, PsLongJsonCarriesEveryLayerStateField) {
  load();
  ASSERT_EQ(ctl({"pin", "stories:4", "cpu:1"}).exitCode, 0);
  const auto r = ctl({"--json", "ps", "-l", "stories"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  const auto j = JsonReader::parse(r.out);
  ASSERT_EQ(j["models"].array.size(), 1u);
  const auto& layers = j["models"][0]["layerStates"];
  ASSERT_EQ(layers.array.size(), 7u);
  const auto& l = layers[5];
  EXPECT_EQ(l.object.size(), 11u) << "one key per LayerState field";
  EXPECT_EQ(l["unit"].number, 5);
  EXPECT_EQ(l["name"].string, "blk.4");
  EXPECT_EQ(l["device"].string, "cpu:1");
  EXPECT_EQ(l["residency"].string, "device");
  EXPECT_EQ(l["stagedOn"].string, "");
  EXPECT_EQ(l["weightBytes"].number, 131072);
  EXPECT_TRUE(l["kernelsReady"].boolean);
  EXPECT_EQ(l["pinned"].string, "cpu:1");
  EXPECT_EQ(l["kvPages"].number, 0);
  EXPECT_EQ(l["kvBytes"].number, 0);
  EXPECT_EQ(l["sessions"].type, testing::JsonValue::Type::kArray);
  EXPECT_EQ(j["models"][0]["migration"].string, "");
}

TEST_F(JitllmctlCommands, PsOfAModelThatIsNotLoadedExits1SayingWhatIs) {
  load();
  const auto r = ctl({"ps", "-l", "nosuch"});
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err, "jitllmctl: no model named 'nosuch' is loaded (loaded: stories)\n");
}

TEST_F(JitllmctlCommands, EventsPrintMigrationEventsLikeTheOthers) {
  load();
  ASSERT_EQ(ctl({"migrate", "stories:3", "cpu:1"}).exitCode, 0);
  ASSERT_EQ(ctl({"pin", "stories:3", "cpu:1"}).exitCode, 0);
  const auto r = ctl({"events"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(
      r.out.find(
          "  migration.committed model=stories device=cpu:1: migration 1: blk.3-blk.3 moved in a 0.412 ms pause\n"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  layers.pinned model=stories device=cpu:1: blk.3-blk.3 pinned to cpu:1\n"), std::string::npos)
      << r.out;
  const auto j = JsonReader::parse(ctl({"events", "--json"}).out);
  const auto& last = j["events"][j["events"].array.size() - 1];
  EXPECT_EQ(last["kind"].string, "migration");
  EXPECT_EQ(last["what"].string, "layers.pinned");
}

TEST_F(JitllmctlCommands, ReadDelayMakesTheTokenCallbackASlowReader) {
  load();
  const auto start = std::chrono::steady_clock::now();
  const auto r = ctl({"run", "stories", "hi", "-n", "5", "--read-delay-ms", "20"});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "t0 t1 t2 t3 t4 \n");
  EXPECT_GE(elapsed, std::chrono::milliseconds(100));
  // The daemon saw each chunk answered only after the reader's delay: that is what flow control
  // acts on.
  const auto answers = daemon_->record().chunkAnswerMs;
  ASSERT_EQ(answers.size(), 5u);
  for (double ms : answers) EXPECT_GE(ms, 19.0);
  // In --json mode too, though nothing is printed until the end.
  const auto jsonStart = std::chrono::steady_clock::now();
  EXPECT_EQ(ctl({"--json", "run", "stories", "hi", "-n", "5", "--read-delay-ms=20"}).exitCode, 0);
  EXPECT_GE(std::chrono::steady_clock::now() - jsonStart, std::chrono::milliseconds(100));
}

TEST_F(JitllmctlCommands, MigrationUsageMistakesExit2WithTheCommandsUsage) {
  load();
  const auto noDevice = ctl({"migrate", "stories:3"});
  EXPECT_EQ(noDevice.exitCode, 2);
  EXPECT_EQ(noDevice.out, "");
  EXPECT_NE(noDevice.err.find("jitllmctl: migrate needs NAME[:LAYERS] DEVICE (DEVICE is missing)\n"), std::string::npos)
      << noDevice.err;
  EXPECT_NE(noDevice.err.find("usage: jitllmctl migrate NAME[:LAYERS] DEVICE"), std::string::npos) << noDevice.err;
  EXPECT_NE(noDevice.err.find("LAYERS: none = every unit"), std::string::npos) << noDevice.err;
  EXPECT_NE(noDevice.err.find("Interrupted (Ctrl-C) before its commit"), std::string::npos) << noDevice.err;
  EXPECT_EQ(ctl({"pin", "stories"}).exitCode, 2);
  EXPECT_EQ(ctl({"migrate", ":3", "cpu:1"}).exitCode, 2);
  EXPECT_EQ(ctl({"migrate", "stories", ""}).exitCode, 2);
  EXPECT_EQ(ctl({"unpin", "stories", "cpu:1"}).exitCode, 2);
  EXPECT_EQ(ctl({"migrate", "stories", "cpu:1", "--wait"}).exitCode, 2);
  for (const char* bad : {"abc", "-5", "1.5", "60001"}) {
    const auto r = ctl({"run", "stories", "hi", "--read-delay-ms", bad});
    EXPECT_EQ(r.exitCode, 2) << bad;
    EXPECT_NE(r.err.find("--read-delay-ms"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("usage: jitllmctl run NAME PROMPT"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(daemon_->record().migrations.empty()) << "a usage error must not reach the daemon";
  EXPECT_TRUE(daemon_->record().prompts.empty());
}

}  // namespace
}  // namespace jitllm::ctl
