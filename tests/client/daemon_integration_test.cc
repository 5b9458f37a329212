// End to end: a real jitllmd on a temporary socket, driven through libjitllmclient and through the
// jitllmctl binary. Skipped (with the reason) until the build has bin/jitllmd.
//
// Each test starts its own daemon:
//   jitllmd --socket <tmp>/s.sock --devices cpu:0 --model-dir <shared>/models
// (--devices cpu:0,cpu:1 for the migration tests)
// and gives it a bounded time to come up, so a regression fails here instead of hanging CI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "jitllm/client.h"
#include "mini_json.h"
#include "process_runner.h"

namespace jitllm::testing {
namespace {

using client::Client;
using client::Error;
using client::ErrorKind;

const std::string kBinDir = JITLLM_BIN_DIR;
const std::string kModelsDir = std::string(JITLLM_SHARED_DIR) + "/models";
const std::string kStories = kModelsDir + "/stories260K.gguf";
constexpr const char* kPrompt = "Once upon a time";
// How long a daemon may take to start serving, and to drain and exit on SIGTERM.
constexpr auto kStartTimeout = std::chrono::seconds(90);  // generous: a loaded machine, a sanitizer build
constexpr auto kStopTimeout = std::chrono::seconds(90);

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// jitllm-run's greedy tokens and text for the reference prompt: what the daemon must reproduce.
struct Reference {
  std::vector<int32_t> tokens;
  std::string text;
};

Reference referenceRun(int n) {
  const auto r = runProcess(kBinDir + "/jitllm-run", {kStories, "-p", kPrompt, "-n", std::to_string(n)},
                            ProcessOptions{.timeout = std::chrono::seconds(20)});
  EXPECT_FALSE(r.timedOut) << "jitllm-run did not exit within 20 s (output so far:\n" << r.out << ")";
  EXPECT_EQ(r.exitCode, 0) << r.err;
  Reference ref;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("greedy_tokens:", 0) == 0) {
      std::istringstream ids(line.substr(14));
      for (int32_t id; ids >> id;) ref.tokens.push_back(id);
    } else if (line.rfind("text: ", 0) == 0) {
      ref.text = line.substr(6);
    }
  }
  return ref;
}

class DaemonIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(kBinDir + "/jitllmd")) GTEST_SKIP() << "no " << kBinDir << "/jitllmd in this build yet";
    if (!exists(kStories)) GTEST_SKIP() << "no " << kStories;
    socket_ = dir_.path() + "/s.sock";
    daemon_ = std::make_unique<BackgroundProcess>(
        kBinDir + "/jitllmd",
        std::vector<std::string>{"--socket", socket_, "--devices", devices_, "--model-dir", kModelsDir},
        dir_.path() + "/jitllmd.log");
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (true) {
      ASSERT_TRUE(daemon_->running()) << "jitllmd exited while starting:\n" << daemon_->log();
      if (exists(socket_)) {
        try {
          Client::connect(socket_).version();
          break;
        } catch (const Error&) {
        }
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "jitllmd did not serve in time:\n" << daemon_->log();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void TearDown() override {
    if (daemon_ && HasFailure()) {
      std::cerr << "--- jitllmd " << (daemon_->running() ? "(running)" : "(exited)") << " log:\n" << daemon_->log();
    }
    if (daemon_ && daemon_->running()) {
      EXPECT_EQ(daemon_->stop(SIGTERM, kStopTimeout), 0) << daemon_->log();
    }
  }

  Client connect() { return Client::connect(socket_); }

  client::ModelInfo loadStories(Client& c) {
    client::LoadOptions options;
    options.name = "stories";
    return c.load(kStories, options);
  }

  ProcessResult ctl(std::vector<std::string> args, const std::string& stdinText = "") {
    args.insert(args.begin(), {"--socket", socket_});
    ProcessOptions options;
    options.stdinData = stdinText;
    options.timeout = std::chrono::seconds(60);
    return runProcess(kBinDir + "/jitllmctl", args, options);
  }

  TempDir dir_;
  std::string socket_;
  std::string devices_ = "cpu:0";
  std::unique_ptr<BackgroundProcess> daemon_;
};

// The same with two CPU devices, for migrations between them.
class DaemonMigrationIntegration : public DaemonIntegration {
 protected:
  DaemonMigrationIntegration() { devices_ = "cpu:0,cpu:1"; }
};

TEST_F(DaemonIntegration, GenerateThroughLibclientGivesExactlyTheTokensOfJitllmRun) {
  const Reference ref = referenceRun(32);
  ASSERT_EQ(ref.tokens.size(), 32u);
  auto c = connect();
  const auto model = loadStories(c);
  EXPECT_EQ(model.name, "stories");
  EXPECT_EQ(model.layers, 5u);
  client::GenerateRequest request;
  request.model = "stories";
  request.prompt = kPrompt;
  request.maxTokens = 32;
  std::vector<int32_t> streamedIds;
  std::string streamedText;
  const auto r = c.generate(request, [&](std::span<const int32_t> ids, std::string_view text) {
    streamedIds.insert(streamedIds.end(), ids.begin(), ids.end());
    streamedText += text;
    return true;
  });
  EXPECT_EQ(r.tokens, ref.tokens);
  EXPECT_EQ(streamedIds, ref.tokens);
  EXPECT_EQ(r.text, ref.text);
  EXPECT_EQ(streamedText, r.text);
  EXPECT_EQ(r.stats.promptTokens, 5u);  // BOS + "Once upon a time"
  EXPECT_EQ(r.stats.generatedTokens, 32u);
  EXPECT_EQ(r.stats.stopReason, client::StopReason::kMaxTokens);
  EXPECT_GT(r.stats.tokensPerSecond, 0);
}

TEST_F(DaemonIntegration, JitllmctlLoadRunAndPsWorkAndRunJsonHasTheTokensOfJitllmRun) {
  const Reference ref = referenceRun(32);
  const auto load = ctl({"load", kStories, "--name", "stories"});
  ASSERT_EQ(load.exitCode, 0) << load.err;
  const auto run = ctl({"--json", "run", "stories", kPrompt, "-n", "32"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const auto j = JsonReader::parse(run.out);
  EXPECT_EQ(j["tokens"].ints(), ref.tokens);
  EXPECT_EQ(j["text"].string, ref.text);
  EXPECT_EQ(j["stats"]["generatedTokens"].number, 32);
  const auto text = ctl({"run", "stories", kPrompt, "-n", "32"});
  EXPECT_EQ(text.exitCode, 0);
  EXPECT_EQ(text.out, ref.text + "\n");
  const auto ps = ctl({"ps", "--json"});
  ASSERT_EQ(ps.exitCode, 0) << ps.err;
  const auto models = JsonReader::parse(ps.out)["models"];
  ASSERT_EQ(models.array.size(), 1u);
  EXPECT_EQ(models[0]["name"].string, "stories");
  EXPECT_EQ(models[0]["placement"][0]["device"].string, "cpu:0");
  EXPECT_EQ(ctl({"ps"}).exitCode, 0);
  EXPECT_EQ(ctl({"status"}).exitCode, 0);
  EXPECT_EQ(ctl({"devices"}).exitCode, 0);
}

TEST_F(DaemonIntegration, PsShowsTheModelsPlacementOverEveryUnit) {
  auto c = connect();
  loadStories(c);
  const auto models = c.models();
  ASSERT_EQ(models.size(), 1u);
  const auto& m = models[0];
  EXPECT_EQ(m.architecture, "llama");
  ASSERT_FALSE(m.placement.empty());
  EXPECT_EQ(m.placement.front().first, 0u);
  EXPECT_EQ(m.placement.front().firstName, "token_embd");
  EXPECT_EQ(m.placement.back().last, m.layers + 1);
  EXPECT_EQ(m.placement.back().lastName, "output");
  for (const auto& p : m.placement) EXPECT_EQ(p.device, "cpu:0");
  EXPECT_TRUE(m.sessions.empty());
}

TEST_F(DaemonIntegration, ClientsThatLoadWithProgressAndLeaveAtOnceDoNotHurtTheDaemon) {
  // What jitllmctl load does on a terminal: a progress sink, then the process exits.
  for (int i = 0; i < 8; i++) {
    auto c = connect();
    client::LoadOptions options;
    options.name = std::string("p").append(std::to_string(i));
    int reports = 0;
    c.load(kStories, options, [&](const client::LoadProgress&) { reports++; });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(daemon_->running()) << "jitllmd died";
  EXPECT_EQ(connect().models().size(), 8u);
}

TEST_F(DaemonIntegration, LoadByPathUnderTheModelDirectoryWorks) {
  auto c = connect();
  client::LoadOptions options;
  options.name = "by-path";
  options.sendPath = true;
  const auto m = c.load(kStories, options);
  EXPECT_EQ(m.name, "by-path");
  client::LoadOptions outside = options;
  outside.name = "outside";
  const std::string copy = dir_.path() + "/copy.gguf";
  ASSERT_EQ(runProcess("/bin/cp", {kStories, copy}).exitCode, 0);
  EXPECT_THROW(c.load(copy, outside), Error) << "a path outside the model directories was opened";
}

TEST_F(DaemonIntegration, ChatAnswersAndJitllmctlChatKeepsGoingOverStdinLines) {
  auto c = connect();
  loadStories(c);
  client::ChatRequest request;
  request.model = "stories";
  request.messages = {{"user", "Tell me a story."}};
  request.maxTokens = 16;
  const auto r = c.chat(request);
  EXPECT_FALSE(r.tokens.empty());
  EXPECT_LE(r.tokens.size(), 16u);
  const auto chat = ctl({"chat", "stories", "-n", "8"}, "Hello\nAnd then?\n");
  EXPECT_EQ(chat.exitCode, 0) << chat.err;
  EXPECT_EQ(std::count(chat.out.begin(), chat.out.end(), '\n'), 2) << chat.out;
}

TEST_F(DaemonIntegration, UnloadRemovesTheModelAndLaterRequestsForItFailClearly) {
  auto c = connect();
  loadStories(c);
  const auto r = ctl({"unload", "stories"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(c.models().empty());
  client::GenerateRequest request;
  request.model = "stories";
  request.prompt = kPrompt;
  try {
    c.generate(request);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_NE(e.message().find("stories"), std::string::npos) << e.message();
  }
  EXPECT_EQ(ctl({"unload", "stories"}).exitCode, 1);
}

TEST_F(DaemonIntegration, EventsReportTheLoadAndTheUnload) {
  auto c = connect();
  loadStories(c);
  c.unload("stories");
  const auto events = c.recentEvents(100);
  bool loaded = false, unloaded = false;
  for (const auto& e : events) {
    // The contract's examples name events both "loaded" and "session.finished": accept either form.
    if (e.kind == client::EventKind::kModel && e.model == "stories") {
      loaded |= e.what == "loaded" || e.what == "model.loaded";
      unloaded |= e.what == "unloaded" || e.what == "model.unloaded";
    }
  }
  EXPECT_TRUE(loaded);
  EXPECT_TRUE(unloaded);
  const auto r = ctl({"events", "--json"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_FALSE(JsonReader::parse(r.out)["events"].array.empty());
}

TEST_F(DaemonIntegration, StoppingAGenerationFromTheCallbackCancelsItInTheDaemon) {
  auto c = connect();
  loadStories(c);
  client::GenerateRequest request;
  request.model = "stories";
  request.prompt = kPrompt;
  request.maxTokens = 1500;
  request.sampling.temperature = 1.0f;
  int chunks = 0;
  const auto r = c.generate(request, [&](std::span<const int32_t>, std::string_view) { return ++chunks < 3; });
  EXPECT_TRUE(r.cancelled);
  // The session must end as cancelled, not run on to its end (with Cap'n Proto 0.9 a server only
  // sees a dropped call if it called context.allowCancellation()).
  std::string ending;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ending.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : c.recentEvents(100)) {
      const bool ended = e.what.find("cancelled") != std::string::npos || e.what.find("finished") != std::string::npos;
      if (e.kind == client::EventKind::kSession && ended) ending = e.what + ": " + e.message;
    }
    if (ending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(ending.find("cancelled"), std::string::npos) << "the session ended as: " << ending;
  EXPECT_TRUE(c.models().at(0).sessions.empty()) << "the cancelled session is still there";
}

TEST_F(DaemonIntegration, SigtermLetsARunningGenerationFinishThenExitsZero) {
  auto c = connect();
  loadStories(c);
  client::GenerateRequest request;
  request.model = "stories";
  request.prompt = kPrompt;
  request.maxTokens = 200;
  // SIGTERM at the first chunk, and this reader waits in it until the daemon says it is stopping:
  // the daemon throttles the session at 64 unread tokens, so the reply is surely unfinished then.
  // (Counting chunks to pick the moment failed on a fast machine: a busy reader gets the 200
  // tokens in fewer chunks than that count, and no SIGTERM was ever sent.)
  bool signalled = false, stopping = false;
  size_t tokensWhenStopping = 0;
  const auto r = c.generate(request, [&](std::span<const int32_t> tokens, std::string_view) {
    if (!signalled) {
      signalled = true;
      tokensWhenStopping = tokens.size();
      ::kill(daemon_->pid(), SIGTERM);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!(stopping = daemon_->log().find("daemon.stopping") != std::string::npos) &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    return true;
  });
  ASSERT_TRUE(stopping) << "no daemon.stopping 20 s after SIGTERM:\n" << daemon_->log();
  EXPECT_LT(tokensWhenStopping, 200u);
  EXPECT_FALSE(r.cancelled);
  // The grace period lets the reply run to its own end, past the moment the daemon began stopping.
  EXPECT_TRUE(r.stats.stopReason == client::StopReason::kMaxTokens ||
              r.stats.stopReason == client::StopReason::kEndOfGeneration)
      << int(r.stats.stopReason);
  EXPECT_GT(r.tokens.size(), tokensWhenStopping);
  EXPECT_EQ(daemon_->stop(0, kStopTimeout), 0) << "jitllmd did not exit 0 after SIGTERM:\n" << daemon_->log();
  try {
    Client::connect(socket_);
    FAIL() << "connected to a daemon that stopped";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisconnected);
  }
}

TEST_F(DaemonIntegration, ASecondDaemonOnTheSameSocketRefusesClearly) {
  const auto r = runProcess(kBinDir + "/jitllmd", {"--socket", socket_, "--devices", "cpu:0"},
                            ProcessOptions{.timeout = std::chrono::seconds(30)});
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE((r.out + r.err).find(socket_), std::string::npos) << r.out << r.err;
  EXPECT_EQ(connect().version().protocol, client::kProtocolVersion);  // the first one still serves
}

TEST_F(DaemonMigrationIntegration, JitllmctlMigratesEveryUnitUnderASlowReaderAndTheReplyIsUnchanged) {
  const Reference ref = referenceRun(600);
  ASSERT_GT(ref.tokens.size(), 128u) << "the reply must outlast the daemon's 64 queued tokens";
  const auto load = ctl({"load", kStories, "--name", "stories", "--devices", "cpu:0"});
  ASSERT_EQ(load.exitCode, 0) << load.err;
  // A slow reader: the daemon throttles its session (`waiting`), so the move happens mid-reply.
  // (Under ASan the daemon may generate slower than the reader reads: then it is `decode`.)
  ProcessResult slow;
  std::thread reader([&] { slow = ctl({"--json", "run", "stories", kPrompt, "-n", "600", "--read-delay-ms", "100"}); });
  bool waiting = false;
  ProcessResult moved;
  try {
    for (int i = 0; i < 1000 && !waiting; i++) {
      const auto ps = ctl({"--json", "ps", "stories"});
      if (ps.exitCode == 0) {
        const JsonValue models = JsonReader::parse(ps.out)["models"];
        for (const auto& session : models.array.at(0)["sessions"].array) {
          // Throttled by the slow reader, or (in a slow sanitizer build) still decoding: streaming.
          waiting = waiting || session["state"].string == "waiting" || session["state"].string == "decode";
        }
      }
      if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    moved = ctl({"migrate", "stories", "cpu:1"});
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  reader.join();
  ASSERT_TRUE(waiting) << "the slow reader's session was never seen streaming";
  EXPECT_EQ(moved.exitCode, 0) << moved.err;
  EXPECT_EQ(moved.out.rfind("migrated stories:token_embd-output (7 units) cpu:0 -> cpu:1, ", 0), 0u) << moved.out;
  for (const char* key : {"\npause_ms ", "  prepare_ms ", "  bytes_precopied ", "  bytes_in_pause ",
                          "  recomputed_tokens 0  ", "  sessions 1\n"}) {
    EXPECT_NE(moved.out.find(key), std::string::npos) << key << " in:\n" << moved.out;
  }
  ASSERT_EQ(slow.exitCode, 0) << slow.err;
  EXPECT_EQ(JsonReader::parse(slow.out)["tokens"].ints(), ref.tokens) << "the reply changed when its layers moved";

  const auto ps = ctl({"--json", "ps", "-l", "stories"});
  const auto layers = JsonReader::parse(ps.out)["models"][0]["layerStates"];
  ASSERT_EQ(layers.array.size(), 7u) << ps.out;
  for (const auto& l : layers.array) EXPECT_EQ(l["device"].string, "cpu:1") << l["name"].string;
  EXPECT_NE(ctl({"events"}).out.find("migration.committed model=stories device=cpu:1"), std::string::npos);
}

TEST_F(DaemonMigrationIntegration, APinnedUnitStaysUntilUnpinnedOrForced) {
  auto c = connect();
  client::LoadOptions options;
  options.name = "stories";
  options.devices = {"cpu:0"};
  c.load(kStories, options);
  const auto pinned = ctl({"pin", "stories:output", "cpu:1"});
  ASSERT_EQ(pinned.exitCode, 0) << pinned.err;
  EXPECT_NE(pinned.out.find("pinned stories:output to cpu:1\n"), std::string::npos) << pinned.out;
  EXPECT_EQ(c.models().at(0).layerStates.at(6).pinned, "cpu:1");
  const auto refused = ctl({"migrate", "stories", "cpu:0"});
  EXPECT_EQ(refused.exitCode, 1);
  EXPECT_NE(refused.err.find("pinned to cpu:1"), std::string::npos) << refused.err;
  EXPECT_EQ(c.models().at(0).layerStates.at(6).device, "cpu:1");  // nothing moved
  EXPECT_EQ(ctl({"unpin", "stories:output"}).exitCode, 0);
  EXPECT_EQ(c.models().at(0).layerStates.at(6).pinned, "");
  const auto moved = ctl({"--json", "migrate", "stories", "cpu:0"});
  ASSERT_EQ(moved.exitCode, 0) << moved.err;
  const auto j = JsonReader::parse(moved.out);
  EXPECT_TRUE(j["committed"].boolean);
  EXPECT_EQ(j["units"].number, 1);
  EXPECT_EQ(j["to"].string, "cpu:0");
}

}  // namespace
}  // namespace jitllm::testing
