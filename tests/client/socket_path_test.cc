// Where clients look for jitllmd's socket, and what they say when nobody is there.
#include "jitllm/socket_path.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>

#include "jitllm/client.h"
#include "process_runner.h"

namespace jitllm::client {
namespace {

SocketPathInputs inputs(std::set<std::string> existing = {}) {
  SocketPathInputs in;
  in.uid = 1000;
  in.socketExists = [existing](const std::string& p) { return existing.count(p) > 0; };
  return in;
}

TEST(SocketPath, AnExplicitPathWinsOverEverythingElse) {
  auto in = inputs({"/run/user/1000/jitllm/jitllmd.sock"});
  in.explicitPath = "/tmp/mine.sock";
  in.socketEnv = "/tmp/env.sock";
  in.xdgRuntimeDir = "/run/user/1000";
  EXPECT_EQ(resolveSocketPath(in), "/tmp/mine.sock");
}

TEST(SocketPath, JitllmSocketWinsOverTheUsersDaemonAndTheSystemSocket) {
  auto in = inputs({"/run/user/1000/jitllm/jitllmd.sock"});
  in.socketEnv = "/tmp/env.sock";
  in.xdgRuntimeDir = "/run/user/1000";
  EXPECT_EQ(resolveSocketPath(in), "/tmp/env.sock");
}

TEST(SocketPath, AnEmptyJitllmSocketCountsAsUnset) {
  auto in = inputs();
  in.socketEnv = "";
  EXPECT_EQ(resolveSocketPath(in), kSystemSocketPath);
}

TEST(SocketPath, TheUsersOwnDaemonIsPreferredOnlyWhenItsSocketExists) {
  auto in = inputs({"/run/user/1000/jitllm/jitllmd.sock"});
  in.xdgRuntimeDir = "/run/user/1000";
  EXPECT_EQ(resolveSocketPath(in), "/run/user/1000/jitllm/jitllmd.sock");
  auto none = inputs();
  none.xdgRuntimeDir = "/run/user/1000";
  EXPECT_EQ(resolveSocketPath(none), "/run/jitllm/jitllmd.sock");
}

TEST(SocketPath, WithoutXdgRuntimeDirTheUsersSocketIsUnderTmpByUid) {
  EXPECT_EQ(userSocketPath(nullptr, 1234), "/tmp/jitllm-1234/jitllmd.sock");
  EXPECT_EQ(userSocketPath("", 1234), "/tmp/jitllm-1234/jitllmd.sock");
  auto in = inputs({"/tmp/jitllm-1000/jitllmd.sock"});
  EXPECT_EQ(resolveSocketPath(in), "/tmp/jitllm-1000/jitllmd.sock");
}

TEST(SocketPath, DefaultSocketPathReadsThisProcesssEnvironment) {
  ::setenv("JITLLM_SOCKET", "/tmp/from-env.sock", 1);
  EXPECT_EQ(defaultSocketPath(), "/tmp/from-env.sock");
  EXPECT_EQ(defaultSocketPath("/tmp/explicit.sock"), "/tmp/explicit.sock");
  ::unsetenv("JITLLM_SOCKET");
  testing::TempDir dir;
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string savedValue = saved ? saved : "";
  ::setenv("XDG_RUNTIME_DIR", dir.path().c_str(), 1);
  EXPECT_EQ(defaultSocketPath(), kSystemSocketPath);  // no user daemon there
  if (saved)
    ::setenv("XDG_RUNTIME_DIR", savedValue.c_str(), 1);
  else
    ::unsetenv("XDG_RUNTIME_DIR");
}

TEST(SocketPath, TheNotRunningMessageNamesThePathAndHowToStartTheDaemon) {
  EXPECT_EQ(notRunningMessage("/run/jitllm/jitllmd.sock"),
            "jitllmd is not running (no socket at /run/jitllm/jitllmd.sock): start it with "
            "`systemctl start jitllmd` or `jitllmd`");
}

TEST(Connect, WhereNoSocketExistsTheErrorIsDisconnectedWithTheNotRunningMessage) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/absent.sock";
  try {
    Client::connect(path);
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisconnected);
    EXPECT_EQ(e.message(), notRunningMessage(path));
  }
}

TEST(Connect, AStaleSocketFileFromACrashIsReportedAsNotRunning) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/stale.sock";
  // A socket bound and closed without unlinking: what a crashed daemon leaves behind.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  try {
    Client::connect(path);
    FAIL() << "connected to a stale socket";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDisconnected);
    EXPECT_NE(e.message().find("jitllmd is not running (stale socket at " + path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("systemctl start jitllmd"), std::string::npos);
  }
}

TEST(Connect, ASocketPathTooLongForUnixSocketsIsRefusedWithItsLength) {
  const std::string path = "/tmp/" + std::string(200, 'x') + ".sock";
  try {
    Client::connect(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_NE(e.message().find("socket path too long"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace jitllm::client
