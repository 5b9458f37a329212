// The jitllmctl binary's exit statuses and messages, as scripts see them: 0 ok, 1 error with a
// message that says what to do, 2 bad usage.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "jitllm/socket_path.h"
#include "mini_json.h"
#include "process_runner.h"

namespace jitllm::testing {
namespace {

const std::string kJitllmctl = std::string(JITLLM_BIN_DIR) + "/jitllmctl";

ProcessResult ctl(const std::vector<std::string>& args, ProcessOptions options = {}) {
  options.timeout = std::chrono::seconds(20);
  return runProcess(kJitllmctl, args, options);
}

TEST(JitllmctlBinary, BadUsageExitsWith2AndSaysWhatIsWrong) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"frobnicate"},
                                             {"run"},
                                             {"run", "m"},
                                             {"ps", "--bogus"},
                                             {"load"},
                                             {"cancel", "x"},
                                             {"migrate"},
                                             {"migrate", "m"},
                                             {"pin", "m:3"},
                                             {"unpin"},
                                             {"run", "m", "p", "--read-delay-ms", "soon"},
                                             {"policy", "thermal", "now"}}) {
    const auto r = ctl(args);
    EXPECT_EQ(r.exitCode, 2) << "args: " << (args.empty() ? "" : args[0]) << "\n" << r.err;
    EXPECT_NE(r.err.find("jitllmctl: "), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(JitllmctlBinary, WithoutADaemonEveryCommandExitsWith1AndTheNotRunningMessage) {
  TempDir dir;
  const std::string socket = dir.path() + "/jitllmd.sock";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"status"},
                                                                                    {"devices"},
                                                                                    {"ps"},
                                                                                    {"events"},
                                                                                    {"unload", "m"},
                                                                                    {"run", "m", "p"},
                                                                                    {"cancel", "1"},
                                                                                    {"migrate", "m:0-5", "cpu:1"},
                                                                                    {"pin", "m", "cpu:1"},
                                                                                    {"unpin", "m"}}) {
    auto withSocket = args;
    withSocket.push_back("--socket");
    withSocket.push_back(socket);
    const auto r = ctl(withSocket);
    EXPECT_EQ(r.exitCode, 1) << args[0] << "\n" << r.err;
    EXPECT_EQ(r.err, "jitllmctl: " + client::notRunningMessage(socket) + "\n");
  }
}

TEST(JitllmctlBinary, TheDefaultSocketComesFromJitllmSocketWhenSet) {
  TempDir dir;
  ProcessOptions options;
  options.setEnv["JITLLM_SOCKET"] = dir.path() + "/from-env.sock";
  const auto r = ctl({"status"}, options);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("no socket at " + dir.path() + "/from-env.sock"), std::string::npos) << r.err;
}

TEST(JitllmctlBinary, WithoutAnySettingItLooksForTheSystemService) {
  if (::access("/run/jitllm/jitllmd.sock", F_OK) == 0) GTEST_SKIP() << "a system jitllmd runs here";
  TempDir dir;
  ProcessOptions options;
  options.unsetEnv = {"JITLLM_SOCKET"};
  options.setEnv["XDG_RUNTIME_DIR"] = dir.path();  // no user daemon there
  const auto r = ctl({"status"}, options);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.err, "jitllmctl: " + client::notRunningMessage("/run/jitllm/jitllmd.sock") + "\n");
}

TEST(JitllmctlBinary, InJsonModeAnErrorIsAlsoAJsonObjectOnStdout) {
  TempDir dir;
  const auto r = ctl({"--json", "ps", "--socket", dir.path() + "/none.sock"});
  EXPECT_EQ(r.exitCode, 1);
  const auto v = JsonReader::parse(r.out);
  EXPECT_EQ(v["error"]["kind"].string, "disconnected");
  EXPECT_EQ(v["error"]["message"].string, client::notRunningMessage(dir.path() + "/none.sock"));
}

TEST(JitllmctlBinary, HelpAndVersionExitZero) {
  EXPECT_EQ(ctl({"--help"}).exitCode, 0);
  EXPECT_EQ(ctl({"chat", "--help"}).exitCode, 0);
  const auto v = ctl({"--version"});
  EXPECT_EQ(v.exitCode, 0);
  EXPECT_EQ(v.out.rfind("jitllmctl ", 0), 0u) << v.out;
}

TEST(JitllmctlBinary, AUserOutsideTheSocketsGroupIsToldHowToGetAccess) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  const struct passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no user 'nobody'";
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string path = dir.path() + "/jitllmd.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ::chmod(path.c_str(), 0660);  // as the system socket: root and its group only
  ProcessOptions options;
  options.runAsUid = int(nobody->pw_uid);
  options.runAsGid = int(nobody->pw_gid);
  const auto r = ctl({"status", "--socket", path}, options);
  ::close(fd);
  if (r.exitCode == 126) GTEST_SKIP() << "cannot drop privileges here";
  if (r.exitCode == 127)
    GTEST_SKIP() << "nobody cannot execute " << kJitllmctl << " (the checkout is not world-readable)";
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("permission denied on " + path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("usermod -aG"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace jitllm::testing
