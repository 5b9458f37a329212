// jitllmd end to end: a real daemon process, real sockets, raw Cap'n Proto clients.
#include <gtest/gtest.h>
#include <pwd.h>

#include <set>

#include "tests/daemon/daemon_calls.h"

namespace jitllm::testing {
namespace {

using namespace std::chrono_literals;

TEST(Daemon, SignalsReadyLoadsAModelByDescriptorAndGeneratesExactlyTheEnginesTokens) {
  DaemonProcess d;
  ASSERT_TRUE(d.ready()) << d.log();
  EXPECT_TRUE(d.notify().waitFor("STATUS=", scaled(10s)));
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  auto v = c.daemon().versionRequest().send().wait(io.waitScope);
  EXPECT_EQ(v.getVersion().getProtocol(), rpc::PROTOCOL_VERSION);
  loadStories(io, c);
  auto r = generate(c, "Once upon a time", 64).wait(io.waitScope);
  const auto golden = storiesGolden();
  ASSERT_GE(golden.size(), 64u);
  EXPECT_EQ(r.ids, std::vector<int32_t>(golden.begin(), golden.begin() + 64));
  EXPECT_EQ(r.streamedIds, r.ids);
  EXPECT_EQ(r.streamedText, r.text);
  EXPECT_EQ(r.text.rfind(", there was a little girl named Lily.", 0), 0u) << r.text;
  EXPECT_EQ(r.generated, 64u);
  EXPECT_GT(r.ttftMs, 0.0);
  EXPECT_TRUE(becomesIdle(io, c));
}

TEST(Daemon, WithDevicesAutoItOwnsTheCpuAndEveryVulkanDeviceOnceAndWatchesForMore) {
  DaemonProcess d({"--devices", "auto"});
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  auto response = c.daemon().devicesRequest().send().wait(io.waitScope);
  auto devices = response.getDevices();
  ASSERT_GE(devices.size(), 1u);
  EXPECT_EQ(std::string(devices[0].getId().cStr()), "cpu:0");
  std::set<std::string> ids, uuids;
  for (auto dev : devices) {
    const std::string id = dev.getId().cStr();
    EXPECT_TRUE(id == "cpu:0" || id.rfind("vulkan:", 0) == 0 || id.rfind("cuda:", 0) == 0) << id;
    EXPECT_TRUE(ids.insert(id).second) << id << " twice";
    EXPECT_TRUE(dev.getOnline()) << id;
  }
  EXPECT_NE(d.log().find("devices: re-enumerated every 30000 ms"), std::string::npos) << d.log();
  // It serves on them.
  loadStories(io, c);
  EXPECT_EQ(generate(c, "Once upon a time", 8).wait(io.waitScope).ids.size(), 8u);
}

TEST(Daemon, TakesItsListeningSocketFromSystemdSocketActivation) {
  DaemonProcess d({}, /*socketActivated=*/true);
  ASSERT_TRUE(d.ready()) << d.log();
  EXPECT_NE(d.log().find("(from systemd)"), std::string::npos) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);
  auto r = generate(c, "Once upon a time", 8).wait(io.waitScope);
  EXPECT_EQ(r.ids.size(), 8u);
  EXPECT_EQ(d.stop(), 0);
  EXPECT_TRUE(d.notify().waitFor("STOPPING=1", scaled(10s)));
}

TEST(Daemon, ThirtyTwoConcurrentClientsEachGetExactlyTheirOwnTokensAndLeaveNothingBehind) {
  DaemonProcess d;
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection admin(io, d.socket());
  loadStories(io, admin);
  // Round 0 warms up: it makes resident the code paths of 32 connections and the model's pages
  // (file-backed pages count in RSS and never leave). Round 1 must then leave nothing behind.
  const auto golden = storiesGolden();
  long rssBefore = 0;
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      ASSERT_TRUE(becomesIdle(io, admin));
      rssBefore = d.rssKiB();
    }
    std::vector<std::unique_ptr<RpcConnection>> clients;
    kj::Vector<kj::Promise<GenerateResult>> calls;
    for (int i = 0; i < 32; i++) {
      clients.push_back(std::make_unique<RpcConnection>(io, d.socket()));
      calls.add(generate(*clients.back(), "Once upon a time", 100));
    }
    const auto start = std::chrono::steady_clock::now();
    auto results = kj::joinPromises(calls.releaseAsArray()).wait(io.waitScope);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::set<uint64_t> sessions;
    for (auto& r : results) {
      EXPECT_EQ(r.ids, std::vector<int32_t>(golden.begin(), golden.begin() + 100));
      sessions.insert(r.session);
    }
    EXPECT_EQ(sessions.size(), 32u) << "each client had its own session";
    std::printf("round %d: 32 clients x 100 tokens in %.2f s (%.0f tok/s aggregate)\n", round, seconds, 3200 / seconds);
  }
  EXPECT_TRUE(becomesIdle(io, admin)) << "KV pools must be empty after the clients end";
  const long rssAfter = d.rssKiB();
  if (!kSanitized) {
    EXPECT_LE(double(rssAfter), double(rssBefore) * 1.05) << rssBefore << " KiB before, " << rssAfter << " after";
  }
}

TEST(Daemon, AClientThatVanishesMidReplyHasItsSessionCancelledAndItsPagesFreed) {
  DaemonProcess d;
  ASSERT_TRUE(d.ready()) << d.log();
  {
    auto io = kj::setupAsyncIo();
    RpcConnection c(io, d.socket());
    loadStories(io, c);
  }
  const pid_t child = ::fork();
  if (child == 0) {
    // A client that starts a long reply, reads it slowly and is then killed.
    auto io = kj::setupAsyncIo();
    RpcConnection c(io, d.socket());
    auto p = generate(c, "Once upon a time", 1800, nullptr, &io.provider->getTimer(), 50 * kj::MILLISECONDS);
    io.provider->getTimer().afterDelay(30 * kj::SECONDS).wait(io.waitScope);
    ::_exit(0);
  }
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  bool sawSession = false;
  for (int i = 0; i < 3000 && !sawSession; i++) {  // bounded, generous for a loaded machine
    sawSession = sessionsAndKv(io, c).first == 1;
    io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(io.waitScope);
  }
  ASSERT_TRUE(sawSession);
  EXPECT_GT(sessionsAndKv(io, c).second, 0u);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(becomesIdle(io, c, 0));
  EXPECT_NE(d.log().find("session.cancelled"), std::string::npos);
  // And the daemon still serves.
  EXPECT_EQ(generate(c, "Once upon a time", 4).wait(io.waitScope).ids.size(), 4u);
}

TEST(Daemon, DroppingAGenerateCallCancelsItAndFreesItsPagesWhileTheConnectionStays) {
  DaemonProcess d({"--default-context", "2048"});
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);
  {
    auto call = generate(c, "Once upon a time", 1800, nullptr, &io.provider->getTimer(), 20 * kj::MILLISECONDS);
    io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(io.waitScope);
    EXPECT_EQ(sessionsAndKv(io, c).first, 1u);
  }  // the promise is dropped here: Cap'n Proto sends a Finish and the daemon must stop
  EXPECT_TRUE(becomesIdle(io, c, 0));
  EXPECT_NE(d.log().find("session.cancelled"), std::string::npos) << d.log();
  EXPECT_EQ(d.log().find("session.finished"), std::string::npos) << "the reply must not run to its end";
  EXPECT_EQ(generate(c, "Once upon a time", 4).wait(io.waitScope).ids.size(), 4u);
}

TEST(Daemon, ASlowReaderNeitherBlocksOtherSessionsNorBuffersWithoutBound) {
  // A small queue limit, so the slow session is throttled however fast this build generates.
  const auto config = std::filesystem::temp_directory_path() / ("jitllmd-slow-" + std::to_string(::getpid()) + ".conf");
  std::ofstream(config) << "max_queued_tokens = 8\n";
  DaemonProcess d({"--default-context", "2048", "--config", config.string()});
  std::filesystem::remove(config);
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection slowConn(io, d.socket()), fastConn(io, d.socket());
  loadStories(io, slowConn);
  auto slowState = std::make_shared<CollectingSink::State>();
  // The reader takes a chunk a second: slower than the daemon generates even under a sanitizer on
  // a loaded machine, so the session surely reaches its limit of unsent tokens.
  auto slow =
      generate(slowConn, "Once upon a time", 1500, slowState, &io.provider->getTimer(), 1000 * kj::MILLISECONDS);
  io.provider->getTimer().afterDelay(300 * kj::MILLISECONDS).wait(io.waitScope);
  const auto start = std::chrono::steady_clock::now();
  auto fast = generate(fastConn, "Once upon a time", 200).wait(io.waitScope);
  const double fastSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(fast.ids.size(), 200u);
  if (!kSanitized) {
    EXPECT_LT(fastSeconds, 5.0) << "the fast session waited for the slow one";
  }
  // The slow session is throttled: it runs ahead of its reader by at most a window - the queue of
  // unsent tokens (8) and the chunks in flight to the reader (4, each at most the queue and a
  // step's token) - never towards the 1500 it asked for. (The fast session's entry leaves ps at the
  // worker's next iteration: poll, bounded.)
  auto resp = fastConn.daemon().modelsRequest().send().wait(io.waitScope);
  auto settled = [&] {
    auto sessions = resp.getModels()[0].getSessions();
    return sessions.size() == 1 && std::string(sessions[0].getState().cStr()) == "waiting";
  };
  const auto deadline = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(120));
  while (!settled() && std::chrono::steady_clock::now() < deadline) {
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
    resp = fastConn.daemon().modelsRequest().send().wait(io.waitScope);
  }
  ASSERT_EQ(resp.getModels().size(), 1u);
  ASSERT_EQ(resp.getModels()[0].getSessions().size(), 1u);
  auto s = resp.getModels()[0].getSessions()[0];
  EXPECT_EQ(std::string(s.getState().cStr()), "waiting");
  const size_t prompt = 5;  // "Once upon a time" with BOS
  const size_t generated = s.getTokens() + 1 - prompt, received = slowState->ids.size();
  EXPECT_LE(generated, received + 8 + 4 * 9 + 1)
      << "a slow reader must not make the daemon generate ahead without bound (" << generated << " generated, "
      << received << " received)";
  EXPECT_LT(generated, 1500u);
}

TEST(Daemon, BadRequestsGetClearErrorsAndTheDaemonKeepsServing) {
  DaemonProcess d({"--default-context", "64"});
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);

  auto unknown = c.daemon().generateRequest();
  unknown.initRequest().setModel("nope");
  unknown.getRequest().initPrompt().setText("hi");
  unknown.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  const std::string unknownError = errorOf(unknown.send().ignoreResult(), io.waitScope);
  EXPECT_NE(unknownError.find("no model named 'nope' is loaded (loaded: stories)"), std::string::npos) << unknownError;

  auto badSampling = c.daemon().generateRequest();
  badSampling.initRequest().setModel("stories");
  badSampling.getRequest().initPrompt().setText("hi");
  badSampling.getRequest().initSampling().setTopP(0);
  badSampling.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  EXPECT_NE(errorOf(badSampling.send().ignoreResult(), io.waitScope).find("top-p"), std::string::npos);

  auto badTier = c.daemon().generateRequest();
  badTier.initRequest().setModel("stories");
  badTier.getRequest().initPrompt().setText("hi");
  badTier.getRequest().setTier("urgent");
  badTier.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  EXPECT_NE(errorOf(badTier.send().ignoreResult(), io.waitScope).find("unknown tier 'urgent'"), std::string::npos);

  // A tier named on the request is the one the reply ran in (the test runs as root, an admin).
  auto batch = c.daemon().generateRequest();
  batch.initRequest().setModel("stories");
  batch.getRequest().initPrompt().setText("Once upon a time");
  batch.getRequest().setMaxTokens(3);
  batch.getRequest().setTier("batch");
  batch.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  const auto batchReply = batch.send().wait(io.waitScope);
  EXPECT_EQ(std::string(batchReply.getStats().getTier().cStr()), "batch");
  EXPECT_TRUE(batchReply.getStats().getMetTargets()) << "batch has no targets to miss";

  std::string longPrompt;
  for (int i = 0; i < 100; i++) longPrompt += "Once upon a time ";
  auto tooLong = c.daemon().generateRequest();
  tooLong.initRequest().setModel("stories");
  tooLong.getRequest().initPrompt().setText(longPrompt);
  tooLong.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  EXPECT_NE(errorOf(tooLong.send().ignoreResult(), io.waitScope).find("does not fit the context of 64"),
            std::string::npos);

  auto notGguf = c.daemon().loadRequest();
  notGguf.initSource().setFile(kj::heap<FdFile>(::open("/etc/hostname", O_RDONLY | O_CLOEXEC)));
  EXPECT_NE(errorOf(notGguf.send().ignoreResult(), io.waitScope).find("invalid GGUF"), std::string::npos);

  auto outside = c.daemon().loadRequest();
  outside.initSource().setPath("/etc/hostname");
  EXPECT_NE(errorOf(outside.send().ignoreResult(), io.waitScope).find("not under the daemon's model directories"),
            std::string::npos);

  {
    // An oversized message breaks only its own connection.
    RpcConnection hostile(io, d.socket());
    auto huge = hostile.daemon().generateRequest();
    huge.initRequest().setModel("stories");
    huge.getRequest().initPrompt().initTokens(20 * 1024 * 1024);  // 80 MB of token ids
    huge.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
    EXPECT_NE(errorOf(huge.send().ignoreResult(), io.waitScope), "(no error)");
  }
  EXPECT_EQ(generate(c, "Once upon a time", 4).wait(io.waitScope).ids.size(), 4u);
  EXPECT_TRUE(becomesIdle(io, c));
}

TEST(Daemon, AStaleSocketIsReplacedAndASecondDaemonOnTheSameSocketIsRefused) {
  DaemonProcess first;
  ASSERT_TRUE(first.ready()) << first.log();
  // A second daemon on the same path refuses clearly and exits 1.
  const pid_t second = ::fork();
  if (second == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);
    ::execl(binPath("jitllmd").c_str(), "jitllmd", "--socket", first.socket().c_str(), nullptr);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(second, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  // A crash leaves the socket file behind; the next daemon replaces it.
  const std::string socket = first.socket();
  EXPECT_EQ(first.stop(SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(std::filesystem::exists(socket));
  const pid_t third = ::fork();
  if (third == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);
    ::execl(binPath("jitllmd").c_str(), "jitllmd", "--socket", socket.c_str(), "--threads", "1", nullptr);
    ::_exit(127);
  }
  bool served = false;
  for (int i = 0; i < 1500 && !served; i++) {
    try {
      auto io = kj::setupAsyncIo();
      RpcConnection c(io, socket);
      c.daemon().versionRequest().send().wait(io.waitScope);
      served = true;
    } catch (...) {
      std::this_thread::sleep_for(20ms);
    }
  }
  EXPECT_TRUE(served);
  ::kill(third, SIGTERM);
  ::waitpid(third, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(std::filesystem::exists(socket)) << "a clean exit removes the socket it created";
}

TEST(Daemon, SigtermLetsRunningRepliesFinishThenExitsZero) {
  DaemonProcess d({"--grace-period", "20"});
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);
  auto reply = generate(c, "Once upon a time", 400);
  io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS).wait(io.waitScope);
  ::kill(d.pid(), SIGTERM);
  auto r = reply.wait(io.waitScope);
  EXPECT_EQ(r.ids.size(), 400u) << "the running reply was allowed to finish";
  EXPECT_EQ(d.waitExit(30s), 0) << d.log();
  EXPECT_TRUE(d.notify().waitFor("STOPPING=1", scaled(10s)));
  EXPECT_NE(d.log().find("drained: 0 generation(s) cancelled"), std::string::npos) << d.log();
}

TEST(Daemon, SigtermCancelsRepliesThatOutlastTheGracePeriod) {
  DaemonProcess d({"--grace-period", "0.2", "--default-context", "2048"});
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);
  auto reply = generate(c, "Once upon a time", 2000, nullptr, &io.provider->getTimer(), 100 * kj::MILLISECONDS);
  io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(io.waitScope);
  ::kill(d.pid(), SIGTERM);
  std::string error;
  try {
    reply.wait(io.waitScope);
  } catch (const kj::Exception& e) {
    error = e.getDescription().cStr();
  }
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(d.waitExit(30s), 0) << d.log();
  EXPECT_NE(d.log().find("drained: 1 generation(s) cancelled"), std::string::npos) << d.log();
}

TEST(Daemon, PingsTheSystemdWatchdogWellWithinItsInterval) {
  DaemonProcess d({}, false, /*watchdogUsec=*/400000);
  ASSERT_TRUE(d.ready()) << d.log();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(d.notify().waitFor("WATCHDOG=1", scaled(10s)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST(Daemon, SighupRereadsTheConfigFileAndKeepsServing) {
  const auto config = std::filesystem::temp_directory_path() / ("jitllmd-hup-" + std::to_string(::getpid()) + ".conf");
  std::ofstream(config) << "max_sessions = 4\n";
  DaemonProcess d({"--config", config.string()});
  ASSERT_TRUE(d.ready()) << d.log();
  std::ofstream(config, std::ios::trunc) << "max_sessions = 8\ndevices = cpu:0,cpu:1\n";
  ::kill(d.pid(), SIGHUP);
  EXPECT_TRUE(d.notify().waitFor("RELOADING=1", scaled(10s)));
  for (int i = 0; i < 1500 && d.log().find("daemon.reloaded") == std::string::npos; i++)
    std::this_thread::sleep_for(20ms);
  EXPECT_NE(d.log().find("daemon.reloaded"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("'devices' changes only on restart"), std::string::npos) << d.log();
  // A broken file keeps the old settings.
  std::ofstream(config, std::ios::trunc) << "max_sessions = lots\n";
  ::kill(d.pid(), SIGHUP);
  for (int i = 0; i < 1500 && d.log().find("config reload failed") == std::string::npos; i++)
    std::this_thread::sleep_for(20ms);
  EXPECT_NE(d.log().find("config reload failed, keeping the old settings"), std::string::npos) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  c.daemon().versionRequest().send().wait(io.waitScope);
  EXPECT_EQ(d.stop(), 0);
  std::filesystem::remove(config);
}

TEST(Daemon, EventsStreamModelAndSessionChangesToSubscribers) {
  DaemonProcess d;
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  auto seen = std::make_shared<std::vector<std::string>>();
  auto sub = c.daemon().eventsRequest();
  sub.setSink(kj::heap<EventCollector>(seen));
  sub.setReplay(10);
  auto subscription = sub.send().wait(io.waitScope).getSubscription();
  loadStories(io, c);
  generate(c, "Once upon a time", 4).wait(io.waitScope);
  auto has = [&](const std::string& s) { return std::find(seen->begin(), seen->end(), s) != seen->end(); };
  for (int i = 0; i < 1500 && !has("session.finished stories"); i++) {
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
  EXPECT_TRUE(has("daemon.ready ")) << "replayed history";
  EXPECT_TRUE(has("model.loaded stories"));
  EXPECT_TRUE(has("session.started stories"));
  EXPECT_TRUE(has("session.finished stories"));
}

TEST(Daemon, ChatRendersTheConversationAndStreamsTheReply) {
  DaemonProcess d;
  ASSERT_TRUE(d.ready()) << d.log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);
  auto state = std::make_shared<CollectingSink::State>();
  auto req = c.daemon().chatRequest();
  auto r = req.initRequest();
  r.setModel("stories");
  auto messages = r.initMessages(2);
  messages[0].setRole("system");
  messages[0].setContent("You tell stories.");
  messages[1].setRole("user");
  messages[1].setContent("Tell me about a dog.");
  r.setMaxTokens(16);
  req.setSink(kj::heap<CollectingSink>(state));
  auto resp = req.send().wait(io.waitScope);
  EXPECT_EQ(resp.getTokens().size(), 16u);
  EXPECT_EQ(state->ids.size(), 16u);
  EXPECT_EQ(std::string(resp.getText().cStr()), state->text);
  auto bad = c.daemon().chatRequest();
  bad.initRequest().setModel("stories");
  bad.getRequest().initMessages(1)[0].setRole("wizard");
  bad.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  EXPECT_NE(errorOf(bad.send().ignoreResult(), io.waitScope).find("unknown role 'wizard'"), std::string::npos);
}

}  // namespace
}  // namespace jitllm::testing
