// The robustness suite (ctest -L robustness): what a local user who can reach the socket might do
// to stop jitllmd serving the others, scripted against a real daemon. After each attack the
// daemon must still answer with the reply it gave before, hold no KV pages (idle sessions are
// off here, so every page belongs to a running reply), and - after connection storms, outside
// sanitizer builds - be back within 10% of its resident memory.
#include <gtest/gtest.h>
#include <poll.h>
#include <pwd.h>
#include <sys/stat.h>

#include <functional>

#include "tests/daemon/daemon_calls.h"

namespace jitllm::testing {
namespace {

using namespace std::chrono_literals;

// A daemon for attacks: idle sessions off (KV must go back to 0), plus `extra` config lines.
std::unique_ptr<DaemonProcess> startDaemon(const std::string& extra, long maxDescriptors = 0,
                                           std::filesystem::path* configOut = nullptr) {
  const auto config = std::filesystem::temp_directory_path() /
                      ("jitllmd-robust-" + std::to_string(::getpid()) + "-" + std::to_string(::rand()) + ".conf");
  std::ofstream(config) << "idle_sessions = 0\n" << extra;
  auto d =
      std::make_unique<DaemonProcess>(std::vector<std::string>{"--config", config.string()}, false, 0, maxDescriptors);
  if (configOut) {
    *configOut = config;
  } else {
    std::filesystem::remove(config);
  }
  return d;
}

// Lets this test process hold many connections of its own.
void raiseOwnDescriptorLimit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Waits (bounded) until the daemon has closed every one of `fds` (a read sees the end or an error).
bool allClosedByPeer(std::vector<int>& fds, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> closed(fds.size(), false);
  size_t left = fds.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> p;
    std::vector<size_t> which;
    for (size_t i = 0; i < fds.size(); i++) {
      if (!closed[i]) {
        p.push_back({fds[i], POLLIN, 0});
        which.push_back(i);
      }
    }
    if (::poll(p.data(), p.size(), 100) <= 0) continue;
    for (size_t k = 0; k < p.size(); k++) {
      if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char b[4096];
      const ssize_t n = ::recv(fds[which[k]], b, sizeof b, MSG_DONTWAIT);
      if (n <= 0) {
        closed[which[k]] = true;
        left--;
      }
    }
  }
  return left == 0;
}

void closeAll(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// The reply a fresh daemon gives, and the check that an attacked one still gives it and holds no KV.
std::vector<int32_t> reference(kj::AsyncIoContext& io, RpcConnection& c) {
  return generate(c, "Once upon a time", 16).wait(io.waitScope).ids;
}

// Loads stories260K on `d` and returns its reply before any attack (on an event loop of its own,
// gone by the time the test forks or makes another).
std::vector<int32_t> loadStoriesAndReply(DaemonProcess& d) {
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d.socket());
  loadStories(io, c);
  return reference(io, c);
}

// `io`: the test's event loop (a thread has one at most).
void expectServesAsBefore(DaemonProcess& d, const std::vector<int32_t>& before, kj::AsyncIoContext& io) {
  ASSERT_TRUE(d.running()) << d.log();
  RpcConnection c(io, d.socket());
  auto reply =
      generate(c, "Once upon a time", 16)
          .exclusiveJoin(
              io.provider->getTimer().afterDelay(scaled(20000ms) / 1ms * kj::MILLISECONDS).then([]() -> GenerateResult {
                throw std::runtime_error("the daemon did not answer within the bound");
              }));
  try {
    EXPECT_EQ(reply.wait(io.waitScope).ids, before) << "the reply after the attack differs";
  } catch (const std::exception& e) {
    const std::string log = d.log();
    FAIL() << e.what() << "\njitllmd's log ends:\n" << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  }
  EXPECT_TRUE(becomesIdle(io, c, 0)) << "KV pages are still held";
  EXPECT_EQ(sessionsAndKv(io, c).second, 0u);
}

void expectServesAsBefore(DaemonProcess& d, const std::vector<int32_t>& before) {
  auto io = kj::setupAsyncIo();
  expectServesAsBefore(d, before, io);
}

// errorOf with a bound: a call that does not end within it is a failure, not a hang.
std::string errorWithin(kj::Promise<void>&& call, kj::AsyncIoContext& io, std::chrono::milliseconds bound) {
  auto timeout = io.provider->getTimer().afterDelay(scaled(bound) / 1ms * kj::MILLISECONDS).then([] {
    kj::throwFatalException(KJ_EXCEPTION(FAILED, "no answer within the bound: the call hangs"));
  });
  return errorOf(call.exclusiveJoin(kj::mv(timeout)), io.waitScope);
}

// Runs `body` in a child process as user nobody and returns what it wrote; skips without root.
#define JITLLM_REQUIRE_ROOT_AND_NOBODY()                                                \
  do {                                                                                  \
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user"; \
    if (::getpwnam("nobody") == nullptr) GTEST_SKIP() << "no user 'nobody'";            \
  } while (0)

std::string asNobody(DaemonProcess& d, const std::function<std::string()>& body) {
  ::chmod(std::filesystem::path(d.socket()).parent_path().c_str(), 0755);
  ::chmod(d.socket().c_str(), 0666);
  int pipeFds[2];
  if (::pipe(pipeFds) != 0) return "pipe failed";
  const struct passwd* nobody = ::getpwnam("nobody");
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipeFds[0]);
    if (::setgid(nobody->pw_gid) != 0 || ::setuid(nobody->pw_uid) != 0) ::_exit(3);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    } catch (const kj::Exception& e) {
      out = std::string("exception: ") + e.getDescription().cStr();
    }
    (void)!::write(pipeFds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(pipeFds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipeFds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(pipeFds[0]);
  ::waitpid(child, nullptr, 0);
  return out;
}

TEST(Robustness, ConnectionsThatSendNothingAreClosedAndTheirMemoryComesBack) {
  raiseOwnDescriptorLimit();
  auto d = startDaemon("handshake_timeout_ms = 300\n");
  ASSERT_TRUE(d->ready()) << d->log();
  const std::vector<int32_t> before = loadStoriesAndReply(*d);
  const long rssBefore = d->rssKiB();
  std::vector<int> idle;
  for (int i = 0; i < 2000; i++) {
    const int fd = rawConnect(d->socket());
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_GT(idle.size(), 1000u);
  EXPECT_TRUE(allClosedByPeer(idle, scaled(30000ms))) << "connections that sent nothing stayed open";
  closeAll(idle);
  if (!kSanitized) {
    EXPECT_LT(d->rssKiB(), rssBefore * 11 / 10) << "RSS before " << rssBefore << " KiB";
  }
  expectServesAsBefore(*d, before);
}

TEST(Robustness, AcceptingGoesOnAfterTheDaemonRanOutOfDescriptors) {
  auto d = startDaemon("handshake_timeout_ms = 600000\n", 64);
  ASSERT_TRUE(d->ready()) << d->log();
  const std::vector<int32_t> before = loadStoriesAndReply(*d);
  // More connections than the daemon has descriptors: its accepts fail with EMFILE meanwhile.
  std::vector<int> held;
  for (int i = 0; i < 120; i++) {
    const int fd = rawConnect(d->socket());
    if (fd >= 0) held.push_back(fd);
  }
  {
    auto io = kj::setupAsyncIo();
    io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(io.waitScope);
  }
  EXPECT_NE(d->log().find("Too many open files"), std::string::npos) << "the limit was never reached";
  closeAll(held);
  expectServesAsBefore(*d, before);
}

// Clients that announce large requests and stall inside them: the bytes of unfinished requests
// stay under max_inflight_bytes, and the stalled connections are cut after message_timeout_ms.
TEST(Robustness, StalledLargeRequestsHoldBoundedMemoryAndAreCut) {
  auto d = startDaemon("max_inflight_bytes = 16M\nmessage_timeout_ms = 500\n");
  ASSERT_TRUE(d->ready()) << d->log();
  const std::vector<int32_t> before = loadStoriesAndReply(*d);
  const long rssBefore = d->rssKiB();
  // One segment of 1M words (8 MiB); 6 MiB of it sent.
  std::vector<uint8_t> start(8, 0);
  start[5] = 0x00;
  start[6] = 0x10;  // 0x00100000 words, little-endian: bytes 4..7 = 00 00 10 00
  std::vector<int> stalled;
  const std::vector<uint8_t> chunk(size_t(6) << 20, 0);
  for (int i = 0; i < 8; i++) {
    const int fd = rawConnect(d->socket());
    ASSERT_GE(fd, 0);
    ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    // The daemon may cut it before it takes it all: send what it takes.
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    size_t sent = 0;
    const auto deadline = std::chrono::steady_clock::now() + scaled(2000ms);
    while (sent < chunk.size() && std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::send(fd, chunk.data() + sent, chunk.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += size_t(n);
      } else if (errno == EAGAIN) {
        std::this_thread::sleep_for(1ms);
      } else {
        break;  // cut already
      }
    }
    stalled.push_back(fd);
  }
  if (!kSanitized) {
    // At most 16 MiB of request bytes (two of the eight), plus what the kernel buffers.
    EXPECT_LT(d->rssKiB(), rssBefore + 40 * 1024) << "RSS before " << rssBefore << " KiB";
  }
  EXPECT_TRUE(allClosedByPeer(stalled, scaled(10000ms))) << "stalled requests were not cut";
  closeAll(stalled);
  if (!kSanitized) {
    EXPECT_LT(d->rssKiB(), rssBefore * 11 / 10) << "RSS before " << rssBefore << " KiB";
  }
  EXPECT_NE(d->log().find("max_inflight_bytes"), std::string::npos) << "no request was refused for the cap";
  expectServesAsBefore(*d, before);
}

// One user cannot take every connection or every session: past max_connections_per_uid its new
// connections are closed, past max_sessions_per_uid its new replies are OVERLOADED, and another
// user is served all the while.
TEST(Robustness, AUserIsLimitedInConnectionsAndSessionsAndOthersAreServed) {
  JITLLM_REQUIRE_ROOT_AND_NOBODY();
  auto d = startDaemon("max_connections_per_uid = 3\nmax_sessions_per_uid = 2\nmax_queued_tokens = 2\n");
  ASSERT_TRUE(d->ready()) << d->log();
  const std::vector<int32_t> before = loadStoriesAndReply(*d);
  const std::string report = asNobody(*d, [&] {
    auto io = kj::setupAsyncIo();
    std::string out;
    std::vector<std::unique_ptr<RpcConnection>> conns;
    for (int i = 0; i < 3; i++) conns.push_back(std::make_unique<RpcConnection>(io, d->socket()));
    // Two replies whose reader never reads past the first chunk: they stay running.
    std::vector<kj::Promise<GenerateResult>> held;
    for (int i = 0; i < 2; i++) {
      held.push_back(
          generate(*conns[size_t(i)], "Once upon a time", 400, nullptr, &io.provider->getTimer(), 3600 * kj::SECONDS));
    }
    io.provider->getTimer().afterDelay(300 * kj::MILLISECONDS).wait(io.waitScope);
    try {
      generate(*conns[2], "Lily", 8).wait(io.waitScope);
      out += "third session: served\n";
    } catch (const kj::Exception& e) {
      out += std::string("third session: ") + e.getDescription().cStr() + "\n";
    }
    // A fourth connection is closed at once: its first call fails.
    RpcConnection fourth(io, d->socket());
    try {
      fourth.daemon().versionRequest().send().wait(io.waitScope);
      out += "fourth connection: served\n";
    } catch (const kj::Exception& e) {
      out += std::string("fourth connection: ") + e.getDescription().cStr() + "\n";
    }
    // Meanwhile (while this user holds everything it may) root is served: reported by the parent.
    return out;
  });
  EXPECT_NE(report.find("third session: remote exception: uid"), std::string::npos) << report;
  EXPECT_NE(report.find("max_sessions_per_uid"), std::string::npos) << report;
  EXPECT_EQ(report.find("fourth connection: served"), std::string::npos) << report;
  EXPECT_NE(report.find("fourth connection: "), std::string::npos) << report;
  EXPECT_NE(d->log().find("max_connections_per_uid"), std::string::npos);
  expectServesAsBefore(*d, before);
}

TEST(Robustness, EventsShowAUserOnlyTheirOwnSessions) {
  JITLLM_REQUIRE_ROOT_AND_NOBODY();
  auto d = startDaemon("");
  ASSERT_TRUE(d->ready()) << d->log();
  const std::vector<int32_t> before = loadStoriesAndReply(*d);  // root's session: events with uid 0
  const std::string seen = asNobody(*d, [&] {
    auto io = kj::setupAsyncIo();
    RpcConnection mine(io, d->socket());
    auto events = std::make_shared<std::vector<std::string>>();
    auto sub = mine.daemon().eventsRequest();
    sub.setSink(kj::heap<EventCollector>(events));
    sub.setReplay(256);
    auto subscription = sub.send().wait(io.waitScope).getSubscription();
    generate(mine, "Lily", 4).wait(io.waitScope);
    // Bounded wait for its own session's end to arrive.
    for (int i = 0; i < 100; i++) {
      bool finished = false;
      for (const auto& e : *events) finished |= e.rfind("session.finished", 0) == 0;
      if (finished) break;
      io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(io.waitScope);
    }
    std::string out;
    for (const auto& e : *events) out += e + "\n";
    return out;
  });
  EXPECT_NE(seen.find("model.loaded"), std::string::npos) << seen;
  // Its own reply: one session.started and one session.finished; root's: none.
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = seen.find(what); at != std::string::npos; at = seen.find(what, at + 1)) n++;
    return n;
  };
  EXPECT_EQ(count("session.started"), 1u) << seen;
  EXPECT_EQ(count("session.finished"), 1u) << seen;
  // An admin sees both users' sessions.
  auto io = kj::setupAsyncIo();
  RpcConnection admin(io, d->socket());
  auto all = std::make_shared<std::vector<std::string>>();
  auto sub = admin.daemon().eventsRequest();
  sub.setSink(kj::heap<EventCollector>(all));
  sub.setReplay(256);
  auto subscription = sub.send().wait(io.waitScope).getSubscription();
  size_t started = 0;
  for (const auto& e : *all) started += e.rfind("session.started", 0) == 0;
  EXPECT_EQ(started, 2u);
  expectServesAsBefore(*d, before, io);
}

TEST(Robustness, AFifoOrADirectoryInPlaceOfTheConfigIsRefusedOnSighupAndTheDaemonStillStops) {
  std::filesystem::path config;
  auto d = startDaemon("max_sessions = 7\n", 0, &config);
  ASSERT_TRUE(d->ready()) << d->log();
  const std::vector<int32_t> before = loadStoriesAndReply(*d);
  for (const char* kind : {"FIFO", "directory"}) {
    SCOPED_TRACE(kind);
    std::filesystem::remove_all(config);
    if (std::string(kind) == "FIFO") {
      ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
    } else {
      std::filesystem::create_directory(config);
    }
    const size_t logged = d->log().size();
    ::kill(d->pid(), SIGHUP);
    const auto deadline = std::chrono::steady_clock::now() + scaled(10000ms);
    while (d->log().find(std::string("is a ") + (std::string(kind) == "FIFO" ? "FIFO" : "directory"), logged) ==
               std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    EXPECT_NE(d->log().find("not a regular file", logged), std::string::npos) << d->log().substr(logged);
    expectServesAsBefore(*d, before);
  }
  std::filesystem::remove_all(config);
  EXPECT_EQ(d->stop(SIGTERM, std::chrono::duration_cast<std::chrono::seconds>(scaled(30000ms))), 0) << d->log();
}

TEST(Robustness, LoadingAFifoIsRefusedAtOnceAndShutdownFinishes) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllm-fifo-models-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto fifo = dir / "blocked.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  DaemonProcess d({"--model-dir", dir.string()});
  ASSERT_TRUE(d.ready()) << d.log();
  {
    auto io = kj::setupAsyncIo();
    RpcConnection c(io, d.socket());
    auto load = c.daemon().loadRequest();
    load.initSource().setPath(fifo.string());
    const std::string error = errorWithin(load.send().ignoreResult(), io, 10000ms);
    EXPECT_NE(error.find("is a FIFO"), std::string::npos) << error;
    // A descriptor of a FIFO passed with the request: refused the same way.
    const int fd = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // RDWR: does not wait for a writer
    auto passed = c.daemon().loadRequest();
    passed.initSource().setFile(kj::heap<FdFile>(fd));
    const std::string passedError = errorWithin(passed.send().ignoreResult(), io, 10000ms);
    EXPECT_NE(passedError.find("not a regular file"), std::string::npos) << passedError;
  }
  EXPECT_EQ(d.stop(SIGTERM, std::chrono::duration_cast<std::chrono::seconds>(scaled(30000ms))), 0) << d.log();
  std::filesystem::remove_all(dir);
}

TEST(Robustness, BadRequestsAreRefusedByNameAndQuotedShort) {
  auto d = startDaemon("");
  ASSERT_TRUE(d->ready()) << d->log();
  auto io = kj::setupAsyncIo();
  RpcConnection c(io, d->socket());
  loadStories(io, c);
  const std::vector<int32_t> before = reference(io, c);
  auto generateWith = [&](const std::function<void(rpc::GenerateRequest::Builder)>& fill) {
    auto req = c.daemon().generateRequest();
    auto r = req.initRequest();
    r.setModel("stories");
    fill(r);
    req.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
    return errorOf(req.send().ignoreResult(), io.waitScope);
  };
  EXPECT_NE(generateWith([](auto r) { r.initPrompt().setText(""); }).find("the prompt is empty"), std::string::npos);
  EXPECT_NE(generateWith([](auto r) { r.initPrompt().initTokens(0); }).find("the prompt is empty"), std::string::npos);
  EXPECT_NE(generateWith([](auto r) {
              r.initPrompt().setText("Once");
              r.setMaxTokens(0);
            }).find("maxTokens: the reply's token limit must be between 1 and"),
            std::string::npos);
  auto chat = c.daemon().chatRequest();
  chat.initRequest().setModel("stories");
  chat.setSink(kj::heap<CollectingSink>(std::make_shared<CollectingSink::State>()));
  EXPECT_NE(errorOf(chat.send().ignoreResult(), io.waitScope).find("the conversation is empty"), std::string::npos);

  const auto loadNamed = [&](const std::string& name) {
    auto req = c.daemon().loadRequest();
    req.initSource().setFile(kj::heap<FdFile>(::open(sharedPath("models/stories260K.gguf").c_str(), O_RDONLY)));
    req.initOptions().setName(name);
    return errorOf(req.send().ignoreResult(), io.waitScope);
  };
  for (const std::string& bad :
       {std::string("a/b"), std::string("caf\xc3\xa9"), std::string("-x"), std::string("a:b")}) {
    const std::string e = loadNamed(bad);
    EXPECT_NE(e.find("is not allowed: use 1 to 64 letters, digits, '.', '_' or '-'"), std::string::npos) << bad << e;
  }
  const std::string huge = loadNamed(std::string(100000, 'n'));
  EXPECT_NE(huge.find("(100000 characters) is not allowed"), std::string::npos) << huge.substr(0, 300);
  EXPECT_LT(huge.size(), 400u) << "the error echoes the whole name";
  EXPECT_EQ(loadNamed("stories-2.q8_0"), "(no error)");
  expectServesAsBefore(*d, before, io);
}

}  // namespace
}  // namespace jitllm::testing
