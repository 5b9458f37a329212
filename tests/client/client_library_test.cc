// libjitllmclient against a scripted stand-in daemon (fake_daemon.h): every method, streaming and
// cancellation, descriptor passing, error kinds and messages, threads and event loops.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "fake_daemon.h"
#include "jitllm/client.h"
#include "jitllm/client_capnp.h"
#include "process_runner.h"

namespace jitllm::client {
namespace {

using testing::FakeDaemon;
using testing::FakeDaemonRecord;
using testing::TempDir;

class ClientLibrary : public ::testing::Test {
 protected:
  std::string socket() const { return dir_.path() + "/jitllmd.sock"; }
  std::string writeFile(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string gguf() { return writeFile("model.gguf", std::string("GGUF\x03\0\0\0", 8)); }

  TempDir dir_;
};

TEST_F(ClientLibrary, ConnectRefusesADaemonOfAnotherProtocolVersionWithWhatToDo) {
  FakeDaemon daemon(socket(), {.protocol = kProtocolVersion + 1});
  try {
    Client::connect(socket());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_NE(e.message().find("speaks protocol " + std::to_string(kProtocolVersion + 1) + " but this client"),
              std::string::npos)
        << e.message();
  }
}

TEST_F(ClientLibrary, VersionDevicesAndModelsMirrorTheSchema) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  EXPECT_EQ(client.socketPath(), socket());
  const Version v = client.version();
  EXPECT_EQ(v.minor, 1u);
  EXPECT_EQ(v.protocol, kProtocolVersion);
  EXPECT_EQ(v.build, "fake daemon for tests");
  const auto devices = client.devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, "cpu:0");
  EXPECT_EQ(devices[0].memoryTotal, uint64_t(8) << 30);
  EXPECT_EQ(devices[0].threads, 2u);
  EXPECT_FLOAT_EQ(devices[0].telemetry.utilization, 0.25f);
  EXPECT_TRUE(client.models().empty());
}

TEST_F(ClientLibrary, LoadPassesADescriptorOfTheFileTheClientOpenedItself) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  LoadOptions options;
  options.name = "stories";
  const ModelInfo m = client.load(gguf(), options);
  EXPECT_EQ(m.name, "stories");
  EXPECT_EQ(m.path.rfind("fd:", 0), 0u) << m.path;
  EXPECT_EQ(daemon.record().fileMagics, std::vector<std::string>{"GGUF"});
  EXPECT_TRUE(daemon.record().loadedPaths.empty());
  const auto models = client.models();
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].placement.at(0).lastName, "output");
}

TEST_F(ClientLibrary, LoadWithSendPathSendsThePathForTheDaemonToOpen) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  LoadOptions options;
  options.sendPath = true;
  options.name = "a";
  client.load("/srv/models/../models/stories260K.gguf", options);
  ASSERT_EQ(::chdir(dir_.path().c_str()), 0);
  options.name = "b";
  client.load("stories260K.gguf", options);  // relative: made absolute here, where the file is
  EXPECT_EQ(daemon.record().loadedPaths,
            (std::vector<std::string>{"/srv/models/stories260K.gguf", dir_.path() + "/stories260K.gguf"}));
  EXPECT_TRUE(daemon.record().fileMagics.empty());
}

TEST_F(ClientLibrary, LoadOfAFileThatIsNotAModelFailsWithTheDaemonsOwnMessage) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  try {
    client.load(writeFile("notes.txt", "hello"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_EQ(e.message(), "the file is not a GGUF model (bad magic)");  // no "remote exception: "
  }
  EXPECT_TRUE(client.models().empty());  // and the connection still works
}

TEST_F(ClientLibrary, LoadOfAFileTheClientCannotOpenFailsBeforeAskingTheDaemon) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  try {
    client.load(dir_.path() + "/missing.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_EQ(e.message(), "cannot open " + dir_.path() + "/missing.gguf: No such file or directory");
  }
  try {
    client.load(dir_.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("is not a regular file"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(daemon.record().fileMagics.empty());
}

TEST_F(ClientLibrary, LoadFdLeavesTheCallersDescriptorOpen) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  const int fd = ::open(gguf().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  client.loadFd(fd);
  EXPECT_EQ(::fcntl(fd, F_GETFD), FD_CLOEXEC);  // still ours
  ::close(fd);
  EXPECT_EQ(daemon.record().fileMagics, std::vector<std::string>{"GGUF"});
}

TEST_F(ClientLibrary, LoadReportsTheDaemonsProgressInOrder) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  std::vector<std::string> seen;
  client.load(gguf(), {}, [&](const LoadProgress& p) {
    seen.push_back(p.stage + " " + std::to_string(p.done) + "/" + std::to_string(p.total));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"read 1/3", "read 2/3", "bind 3/3"}));
}

TEST_F(ClientLibrary, GenerateStreamsEveryChunkAndReturnsTheWholeResult) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  LoadOptions options;
  options.name = "m";
  client.load(gguf(), options);
  GenerateRequest request;
  request.model = "m";
  request.prompt = "Once upon a time";
  request.maxTokens = 4;
  request.sampling.temperature = 0.7f;
  request.sampling.seed = 42;
  std::vector<int32_t> ids;
  std::string text;
  const GenerateResult r = client.generate(request, [&](std::span<const int32_t> chunk, std::string_view t) {
    ids.insert(ids.end(), chunk.begin(), chunk.end());
    text += t;
    return true;
  });
  EXPECT_EQ(ids, (std::vector<int32_t>{100, 101, 102, 103}));
  EXPECT_EQ(text, "t0 t1 t2 t3 ");
  EXPECT_EQ(r.tokens, ids);
  EXPECT_EQ(r.text, text);
  EXPECT_FALSE(r.cancelled);
  EXPECT_EQ(r.stats.generatedTokens, 4u);
  EXPECT_EQ(r.stats.stopReason, StopReason::kMaxTokens);
  EXPECT_NE(r.stats.sessionId, 0u);
  const auto rec = daemon.record();
  EXPECT_EQ(rec.prompts, std::vector<std::string>{"Once upon a time"});
  EXPECT_FLOAT_EQ(rec.lastTemperature, 0.7f);
  EXPECT_EQ(rec.lastSeed, 42u);
  EXPECT_TRUE(daemon.waitFor([](const FakeDaemonRecord& r) { return r.generationsCompleted == 1; }));
}

TEST_F(ClientLibrary, APromptOfTokenIdsIsSentAsIds) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  GenerateRequest request;
  request.model = "model";
  request.promptTokens = {1, 403, 407};
  request.maxTokens = 1;
  client.generate(request);
  EXPECT_EQ(daemon.record().promptTokens, (std::vector<std::vector<int32_t>>{{1, 403, 407}}));
  request.prompt = "both";
  EXPECT_THROW(client.generate(request), Error);
}

TEST_F(ClientLibrary, ReturningFalseFromTheChunkCallbackCancelsTheGenerationInTheDaemon) {
  FakeDaemon daemon(socket(), {.tokenDelay = std::chrono::milliseconds(5)});
  auto client = Client::connect(socket());
  client.load(gguf());
  GenerateRequest request;
  request.model = "model";
  request.prompt = "go";
  request.maxTokens = 5000;  // 25 s at 5 ms a token if the cancel did not reach the daemon
  int chunks = 0;
  const auto start = std::chrono::steady_clock::now();
  const GenerateResult r =
      client.generate(request, [&](std::span<const int32_t>, std::string_view) { return ++chunks < 3; });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{100, 101, 102}));
  EXPECT_EQ(r.text, "t0 t1 t2 ");
  EXPECT_EQ(r.stats.stopReason, StopReason::kCancelled);
  EXPECT_EQ(r.stats.generatedTokens, 3u);
  EXPECT_TRUE(daemon.waitFor([](const FakeDaemonRecord& r) { return r.generationsCancelled == 1; }))
      << "the daemon's generation was not cancelled";
  const auto sessions = client.models().at(0).sessions;
  EXPECT_EQ(sessions.size(), 0u);  // and its session is gone
  if (!sessions.empty())
    std::cerr << "DEBUG session tokens " << sessions[0].tokens << " completed " << daemon.record().generationsCompleted
              << "\n";
}

TEST_F(ClientLibrary, AnExceptionFromTheCallbackCancelsTheGenerationAndReachesTheCaller) {
  FakeDaemon daemon(socket(), {.tokenDelay = std::chrono::milliseconds(5)});
  auto client = Client::connect(socket());
  client.load(gguf());
  GenerateRequest request;
  request.model = "model";
  request.maxTokens = 5000;
  EXPECT_THROW(client.generate(request,
                               [](std::span<const int32_t>, std::string_view) -> bool {
                                 throw std::runtime_error("the app's own failure");
                               }),
               std::runtime_error);
  EXPECT_TRUE(daemon.waitFor([](const FakeDaemonRecord& r) { return r.generationsCancelled == 1; }));
  EXPECT_EQ(client.version().protocol, kProtocolVersion);  // the client is still usable
}

TEST_F(ClientLibrary, ACallbackThatCallsTheClientIsToldWhyThatCannotWork) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  GenerateRequest request;
  request.model = "model";
  request.maxTokens = 3;
  try {
    client.generate(request, [&](std::span<const int32_t>, std::string_view) {
      client.models();
      return true;
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("callback called a Client method"), std::string::npos) << e.message();
  }
}

TEST_F(ClientLibrary, ErrorKindsFollowTheDaemonsExceptionTypes) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  auto kindOf = [&](const std::string& model) {
    GenerateRequest request;
    request.model = model;
    try {
      client.generate(request);
    } catch (const Error& e) {
      return std::make_pair(e.kind(), e.message());
    }
    return std::make_pair(ErrorKind::kFailed, std::string("(no error)"));
  };
  EXPECT_EQ(kindOf("overloaded"),
            std::make_pair(ErrorKind::kOverloaded, std::string("too many sessions: try again later")));
  EXPECT_EQ(kindOf("unimplemented").first, ErrorKind::kUnimplemented);
  EXPECT_EQ(kindOf("failed").first, ErrorKind::kFailed);
  EXPECT_EQ(kindOf("nosuch"), std::make_pair(ErrorKind::kFailed, std::string("no model named 'nosuch' is loaded")));
  EXPECT_STREQ(errorKindName(ErrorKind::kOverloaded), "overloaded");
}

TEST_F(ClientLibrary, ChatSendsTheWholeConversation) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  ChatRequest request;
  request.model = "model";
  request.messages = {{"system", "be brief"}, {"user", "hi"}, {"assistant", "hello"}, {"user", "how are you?"}};
  std::string streamed;
  const auto r = client.chat(request, [&](std::span<const int32_t>, std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(r.text, "you said: how are you?");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(daemon.record().chatHistorySizes, std::vector<size_t>{4});
}

TEST_F(ClientLibrary, UnloadRemovesTheModelAndAnUnknownNameIsAnError) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  client.unload("model");
  EXPECT_TRUE(client.models().empty());
  try {
    client.unload("model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "no model named 'model' is loaded");
  }
}

TEST_F(ClientLibrary, RecentEventsReturnsTheReplayWithoutWaitingForNewOnes) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  const auto start = std::chrono::steady_clock::now();
  const auto events = client.recentEvents(100);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].what, "started");
  EXPECT_EQ(events[0].kind, EventKind::kDaemon);
  EXPECT_EQ(events[1].what, "loaded");
  EXPECT_EQ(events[1].model, "model");
  EXPECT_EQ(client.recentEvents(1).size(), 1u);
  EXPECT_TRUE(daemon.waitFor([](const FakeDaemonRecord& r) { return r.subscriptionsEnded == 2; }))
      << "the subscriptions were not dropped";
}

TEST_F(ClientLibrary, EventsStreamsNewEventsUntilTheCallbackSaysStop) {
  FakeDaemon daemon(socket());
  auto watcher = Client::connect(socket());
  std::atomic<bool> listening{false};
  std::thread loader([&] {
    // Another client, on its own thread, makes the event happen once the watcher listens.
    while (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto admin = Client::connect(socket());
    LoadOptions options;
    options.name = "late";
    admin.load(gguf(), options);
  });
  std::vector<Event> seen;
  listening = true;
  watcher.events(
      [&](const Event& e) {
        seen.push_back(e);
        return e.what != "loaded";
      },
      1);
  loader.join();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].what, "started");  // the replay
  EXPECT_EQ(seen[1].model, "late");    // then the live event
  EXPECT_TRUE(daemon.waitFor([](const FakeDaemonRecord& r) { return r.subscriptionsEnded == 1; }));
}

TEST_F(ClientLibrary, CancelSessionPassesTheIdAndTheDaemonsRefusal) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.cancelSession(17);
  EXPECT_EQ(daemon.record().cancelledSessions, std::vector<uint64_t>{17});
  try {
    client.cancelSession(999);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "no session 999 is yours (see `jitllmctl ps`)");
  }
}

TEST_F(ClientLibrary, ModelsReportEachUnitsLayerStateAndTheMigrationInProgress) {
  FakeDaemon daemon(socket(), {.tokenDelay = std::chrono::milliseconds(20)});
  auto client = Client::connect(socket());
  client.load(gguf());
  ModelInfo m = client.models().at(0);
  ASSERT_EQ(m.layerStates.size(), 7u);
  EXPECT_EQ(m.layers, 5u);  // the block count is still there beside the units
  EXPECT_EQ(m.layerStates[0].name, "token_embd");
  EXPECT_EQ(m.layerStates[0].residency, "file");
  EXPECT_FALSE(m.layerStates[0].kernelsReady);
  EXPECT_EQ(m.layerStates[3].unit, 3u);
  EXPECT_EQ(m.layerStates[3].name, "blk.2");
  EXPECT_EQ(m.layerStates[3].device, "cpu:0");
  EXPECT_EQ(m.layerStates[3].residency, "device");
  EXPECT_TRUE(m.layerStates[3].kernelsReady);
  EXPECT_EQ(m.layerStates[3].weightBytes, 128u * 1024);
  EXPECT_EQ(m.layerStates[6].name, "output");
  EXPECT_EQ(m.migration, "");
  // Started without waiting, a migration shows where it stages the weights.
  MigrateRequest request;
  request.model = "model";
  request.layers = "1-2";
  request.device = "cpu:1";
  request.wait = false;
  const MigrationStats started = client.migrate(request);
  EXPECT_FALSE(started.committed);
  EXPECT_EQ(started.units, 2u);
  m = client.models().at(0);
  EXPECT_EQ(m.layerStates[2].stagedOn, "cpu:1");
  EXPECT_EQ(m.layerStates[3].stagedOn, "cpu:1");
  EXPECT_EQ(m.layerStates[2].device, "cpu:0");  // not moved yet
  EXPECT_EQ(m.layerStates[1].stagedOn, "");
  EXPECT_EQ(m.migration, "migration 1: blk.1-blk.2 cpu:0 -> cpu:1, preparing");
}

TEST_F(ClientLibrary, LayerStatesCountTheKvPagesOfEachRunningSession) {
  FakeDaemon daemon(socket(), {.tokenDelay = std::chrono::milliseconds(10)});
  auto client = Client::connect(socket());
  client.load(gguf());
  std::thread generating([&] {
    auto other = Client::connect(socket());  // a client per thread
    GenerateRequest request;
    request.model = "model";
    request.maxTokens = 40;
    other.generate(request);
  });
  SessionInfo session;
  std::vector<LayerState> seen;
  for (int i = 0; i < 1000 && seen.empty(); i++) {
    const ModelInfo m = client.models().at(0);
    if (!m.sessions.empty() && m.sessions[0].tokens >= 8) {
      session = m.sessions[0];
      seen = m.layerStates;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  generating.join();
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[0].kvPages, 0u);  // token_embd and output hold no KV
  EXPECT_TRUE(seen[6].sessions.empty());
  for (unsigned u = 1; u <= 5; u++) {
    ASSERT_EQ(seen[u].sessions.size(), 1u) << seen[u].name;
    EXPECT_EQ(seen[u].sessions[0].sessionId, session.id);
    EXPECT_EQ(seen[u].sessions[0].pages, (session.tokens + 3) / 4) << "4 tokens a page";
    EXPECT_EQ(seen[u].kvPages, seen[u].sessions[0].pages);
    EXPECT_EQ(seen[u].kvBytes, uint64_t(seen[u].kvPages) * 4096);
  }
}

TEST_F(ClientLibrary, MigrateSendsEveryRequestFieldAndReturnsEveryStat) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  LoadOptions options;
  options.name = "stories";
  client.load(gguf(), options);
  MigrateRequest request;
  request.model = "stories";
  request.layers = "2-output";
  request.device = "cpu:1";
  request.precopy = false;
  request.force = true;
  const MigrationStats s = client.migrate(request);
  ASSERT_EQ(daemon.record().migrations.size(), 1u);
  const testing::FakeMigrateCall sent = daemon.record().migrations[0];
  EXPECT_EQ(sent.model, "stories");
  EXPECT_EQ(sent.layers, "2-output");
  EXPECT_EQ(sent.device, "cpu:1");
  EXPECT_TRUE(sent.wait);
  EXPECT_FALSE(sent.precopy);
  EXPECT_TRUE(sent.force);
  EXPECT_EQ(s.id, 1u);
  EXPECT_EQ(s.model, "stories");
  EXPECT_EQ(s.firstName, "blk.2");
  EXPECT_EQ(s.lastName, "output");
  EXPECT_EQ(s.from, "cpu:0");
  EXPECT_EQ(s.to, "cpu:1");
  EXPECT_EQ(s.units, 4u);
  EXPECT_TRUE(s.committed);
  EXPECT_DOUBLE_EQ(s.prepareMs, 12.34);
  EXPECT_DOUBLE_EQ(s.pauseMs, 0.412);
  EXPECT_EQ(s.bytesPrecopied, 0u);  // no precopy: everything in the pause
  EXPECT_EQ(s.bytesInPause, 524288u + 8192);
  EXPECT_EQ(s.weightBytes, 4u * 128 * 1024);
  EXPECT_EQ(s.recomputedTokens, 0u);
  EXPECT_EQ(s.sessions, 3u);
  const auto placement = client.models().at(0).placement;
  ASSERT_EQ(placement.size(), 2u);
  EXPECT_EQ(placement[1].device, "cpu:1");
  EXPECT_EQ(placement[1].firstName, "blk.2");
}

TEST_F(ClientLibrary, AMigrateRequestsDefaultsAreTheSchemas) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  MigrateRequest request;
  request.model = "model";
  request.device = "cpu:1";
  const MigrationStats s = client.migrate(request);
  const testing::FakeMigrateCall sent = daemon.record().migrations.at(0);
  EXPECT_EQ(sent.layers, "");  // every unit
  EXPECT_TRUE(sent.wait);
  EXPECT_TRUE(sent.precopy);
  EXPECT_FALSE(sent.force);
  EXPECT_EQ(s.units, 7u);
  EXPECT_EQ(s.firstName, "token_embd");
  EXPECT_EQ(s.bytesPrecopied, 524288u);
}

TEST_F(ClientLibrary, PinMovesWhatIsElsewhereAMigrateOfAPinnedUnitFailsAndUnpinLetsItMove) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  const MigrationStats moved = client.pin("model", "0-1", "cpu:1");
  EXPECT_EQ(moved.units, 2u);
  EXPECT_EQ(moved.to, "cpu:1");
  EXPECT_TRUE(moved.committed);
  const MigrationStats stayed = client.pin("model", "0-1", "cpu:1");
  EXPECT_EQ(stayed.units, 0u);  // already there
  ASSERT_EQ(daemon.record().pins.size(), 2u);
  EXPECT_EQ(daemon.record().pins[0].layers, "0-1");
  EXPECT_EQ(daemon.record().pins[0].device, "cpu:1");
  EXPECT_EQ(client.models().at(0).layerStates.at(2).pinned, "cpu:1");
  MigrateRequest request;
  request.model = "model";
  request.layers = "1";
  request.device = "cpu:0";
  try {
    client.migrate(request);
    FAIL() << "a pinned unit moved";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_EQ(e.message(), "blk.1 of 'model' is pinned to cpu:1: unpin it (jitllmctl unpin model:1) or pass --force");
  }
  client.unpin("model", "1");
  EXPECT_EQ(daemon.record().unpins, (std::vector<std::pair<std::string, std::string>>{{"model", "1"}}));
  EXPECT_EQ(client.migrate(request).units, 1u);
  EXPECT_EQ(client.models().at(0).layerStates.at(2).device, "cpu:0");
}

TEST_F(ClientLibrary, MigrationErrorsKeepTheDaemonsKindAndMessage) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  auto errorOf = [&](const std::string& model, const std::string& layers, const std::string& device) {
    MigrateRequest request;
    request.model = model;
    request.layers = layers;
    request.device = device;
    try {
      client.migrate(request);
    } catch (const Error& e) {
      return std::make_pair(e.kind(), e.message());
    }
    return std::make_pair(ErrorKind::kFailed, std::string("(no error)"));
  };
  EXPECT_EQ(errorOf("nosuch", "", "cpu:1").second, "no model named 'nosuch' is loaded");
  EXPECT_EQ(errorOf("model", "", "gpu:7").second, "no device 'gpu:7' (devices: cpu:0, cpu:1)");
  EXPECT_EQ(errorOf("model", "9", "cpu:1").second,
            "bad layer range '9': '9' is not a block (0-4), token_embd or output");
  EXPECT_EQ(errorOf("overloaded", "", "cpu:1").first, ErrorKind::kOverloaded);
  EXPECT_THROW(client.pin("nosuch", "", "cpu:1"), Error);
  EXPECT_THROW(client.unpin("nosuch", ""), Error);
}

TEST_F(ClientLibrary, MigrationEventsArriveWithTheirOwnKind) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  client.load(gguf());
  MigrateRequest request;
  request.model = "model";
  request.layers = "embd-head";
  request.device = "cpu:1";
  client.migrate(request);
  client.pin("model", "3", "cpu:1");
  const auto events = client.recentEvents(100);
  std::vector<std::string> whats;
  for (const auto& e : events) {
    if (e.kind == EventKind::kMigration) whats.push_back(e.what);
  }
  EXPECT_EQ(whats, (std::vector<std::string>{"migration.preparing", "migration.committed", "layers.pinned"}));
  EXPECT_EQ(events.back().device, "cpu:1");
  EXPECT_STREQ(eventKindName(EventKind::kMigration), "migration");
}

TEST_F(ClientLibrary, ADaemonWithoutMigrationSaysSoInsteadOfCapnpsMethodNotImplemented) {
  FakeDaemon daemon(socket(), {.migration = false});
  auto client = Client::connect(socket());
  MigrateRequest request;
  request.model = "model";
  request.device = "cpu:1";
  try {
    client.migrate(request);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnimplemented);
    EXPECT_EQ(
        e.message().rfind("jitllmd at " + socket() + " does not implement migrate (it is older than this client", 0),
        0u)
        << e.message();
  }
  try {
    client.unpin("model", "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("does not implement unpin"), std::string::npos) << e.message();
  }
  EXPECT_EQ(client.version().protocol, kProtocolVersion);  // the connection survives
}

TEST_F(ClientLibrary, LosingTheDaemonMidStreamIsADisconnectedErrorNamingTheSocket) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  GenerateRequest request;
  request.model = "hangup";
  request.maxTokens = 10;
  int chunks = 0;
  try {
    client.generate(request, [&](std::span<const int32_t>, std::string_view) { return ++chunks > 0; });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisconnected);
    EXPECT_NE(e.message().find("lost the connection to jitllmd at " + socket()), std::string::npos) << e.message();
  }
  EXPECT_EQ(chunks, 2);
  EXPECT_THROW(client.version(), Error);  // every later call fails the same way
}

TEST_F(ClientLibrary, EventsEndsWithDisconnectedWhenTheDaemonStops) {
  auto daemon = std::make_unique<FakeDaemon>(socket());
  auto client = Client::connect(socket());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    daemon.reset();
  });
  try {
    client.events([](const Event&) { return true; }, 0);
    ADD_FAILURE() << "events() returned though the daemon stopped";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisconnected);
    EXPECT_NE(e.message().find(socket()), std::string::npos) << e.message();
  }
  stopper.join();
}

TEST_F(ClientLibrary, TwoClientsOnOneThreadShareItsEventLoop) {
  FakeDaemon daemon(socket());
  auto a = Client::connect(socket());
  auto b = Client::connect(socket());
  EXPECT_EQ(a.version().protocol, b.version().protocol);
  Client moved = std::move(a);
  EXPECT_EQ(moved.devices().size(), 1u);
}

TEST_F(ClientLibrary, AClientCalledFromAnotherThreadRefusesWithAClearMessage) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  std::string message;
  std::thread other([&] {
    try {
      client.version();
    } catch (const Error& e) {
      message = e.message();
    }
  });
  other.join();
  EXPECT_NE(message.find("from a thread other than the one that connected it"), std::string::npos) << message;
}

TEST_F(ClientLibrary, CapnpAccessGivesTheSchemasDaemonCapabilityForPipelinedCalls) {
  FakeDaemon daemon(socket());
  auto client = Client::connect(socket());
  CapnpAccess access = capnpAccess(client);
  // Two calls in flight at once, which the synchronous API cannot do.
  auto v = access.daemon.versionRequest().send();
  auto d = access.daemon.devicesRequest().send();
  EXPECT_EQ(d.wait(access.waitScope).getDevices().size(), 1u);
  EXPECT_EQ(v.wait(access.waitScope).getVersion().getProtocol(), rpc::PROTOCOL_VERSION);
  EXPECT_EQ(access.connection.socketPath(), socket());
}

TEST_F(ClientLibrary, DaemonConnectionRunsOnAnEventLoopTheProgramOwns) {
  FakeDaemon daemon(socket());
  std::string clientError;
  uint32_t protocol = 0;
  std::thread own([&] {
    auto io = kj::setupAsyncIo();
    auto connection = DaemonConnection::connect(*io.lowLevelProvider, socket());
    protocol = connection->daemon().versionRequest().send().wait(io.waitScope).getVersion().getProtocol();
    try {
      Client::connect(socket());  // this thread's loop is not the library's
    } catch (const Error& e) {
      clientError = e.message();
    }
  });
  own.join();
  EXPECT_EQ(protocol, rpc::PROTOCOL_VERSION);
  EXPECT_NE(clientError.find("DaemonConnection"), std::string::npos) << clientError;
}

TEST_F(ClientLibrary, ToErrorStripsCapnpsRemotePrefixAndKeepsTheKind) {
  const Error e = toError(
      kj::Exception(kj::Exception::Type::OVERLOADED, "x.c++", 1, kj::str("remote exception: KV pool full on cpu:0")));
  EXPECT_EQ(e.kind(), ErrorKind::kOverloaded);
  EXPECT_EQ(e.message(), "KV pool full on cpu:0");
}

}  // namespace
}  // namespace jitllm::client
