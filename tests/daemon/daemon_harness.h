// Starts a real jitllmd for a test and talks to it over raw Cap'n Proto RPC.
//
// The daemon runs as a child process on its own temporary socket with a NOTIFY_SOCKET the test
// owns, so tests see its sd_notify messages (READY=1, STATUS=, STOPPING=1) as systemd would.
// Every wait is bounded, so a regression fails the test instead of hanging CI.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <fcntl.h>
#include <kj/async-io.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "jitllm/jitllm.capnp.h"
#include "tests/daemon/bounded_wait.h"

namespace jitllm::testing {

inline std::string sharedPath(const std::string& rel) { return std::string(JITLLM_SHARED_DIR) + "/" + rel; }
inline std::string binPath(const std::string& name) { return std::string(JITLLM_BIN_DIR) + "/" + name; }

// A datagram socket standing in for systemd's notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ::unlink(path.c_str());
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  // Collects messages until one contains `needle` or `timeout` passes; returns all seen.
  bool waitFor(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& m : messages_) {
      if (m.find(needle) != std::string::npos) return true;
    }
    while (std::chrono::steady_clock::now() < deadline) {
      timeval tv{0, 50000};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        messages_.emplace_back(buf, size_t(n));
        if (messages_.back().find(needle) != std::string::npos) return true;
      }
    }
    return false;
  }
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::string path_;
  int fd_;
  std::vector<std::string> messages_;
};

class DaemonProcess {
 public:
  // Starts jitllmd with `args` on a fresh socket; waits (bounded) for READY=1.
  // With `socketActivated`, the test binds the socket and hands it over as systemd does.
  // `watchdogUsec` > 0 sets WATCHDOG_USEC/WATCHDOG_PID as systemd does for WatchdogSec=.
  // `maxDescriptors` > 0 caps the daemon's descriptors (RLIMIT_NOFILE, soft and hard).
  // `activatedHttpSocket` (with socketActivated): a second socket there, passed as systemd passes
  // jitllmd-http.socket's (LISTEN_FDNAMES=rpc:http).
  explicit DaemonProcess(std::vector<std::string> args = {}, bool socketActivated = false, long watchdogUsec = 0,
                         long maxDescriptors = 0, const std::string& activatedHttpSocket = "") {
    dir_ = std::filesystem::temp_directory_path() /
           ("jitllmd-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "jitllmd.sock").string();
    notify_ = std::make_unique<NotifySocket>((dir_ / "notify").string());
    int listenFd = -1, httpFd = -1;
    auto listenOn = [](const std::string& path) {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      ::listen(fd, 64);
      return fd;
    };
    if (socketActivated) {
      listenFd = listenOn(socket_);
      if (!activatedHttpSocket.empty()) httpFd = listenOn(activatedHttpSocket);
    } else {
      args.insert(args.begin(), {"--socket", socket_});
    }
    std::vector<std::string> argv = {binPath("jitllmd"),
                                     "--devices",
                                     "cpu:0",
                                     "--threads",
                                     "1",
                                     "--model-dir",
                                     std::string(JITLLM_SHARED_DIR) + "/models",
                                     "--log-level",
                                     "debug"};
    argv.insert(argv.end(), args.begin(), args.end());
    logPath_ = (dir_ / "jitllmd.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test process that dies (a sanitizer report, a crash) takes its daemon along, rather than
      // leaving it holding ctest's output pipe open until the timeout.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (maxDescriptors > 0) {
        const rlimit limit{rlim_t(maxDescriptors), rlim_t(maxDescriptors)};
        ::setrlimit(RLIMIT_NOFILE, &limit);
      }
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::setenv("NOTIFY_SOCKET", notify_->path().c_str(), 1);
      if (watchdogUsec > 0) {
        ::setenv("WATCHDOG_USEC", std::to_string(watchdogUsec).c_str(), 1);
        ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
      }
      if (listenFd >= 0) {
        ::dup2(listenFd, 3);
        ::setenv("LISTEN_FDS", "1", 1);
        ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
        if (httpFd >= 0) {
          ::dup2(httpFd, 4);
          ::setenv("LISTEN_FDS", "2", 1);
          ::setenv("LISTEN_FDNAMES", "rpc:http", 1);
        }
      } else {
        ::unsetenv("LISTEN_FDS");
      }
      const int log = ::open(logPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(log, 2);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
    if (listenFd >= 0) ::close(listenFd);
    if (httpFd >= 0) ::close(httpFd);
    // Start-up measures each kind of device once (the speed probe) and opens GPUs: slow under a
    // sanitizer or a loaded machine.
    ready_ = notify_->waitFor("READY=1", scaled(std::chrono::seconds(60)));
  }

  ~DaemonProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  bool ready() const { return ready_; }
  // Whether the daemon is still alive (it has not exited or crashed).
  bool running() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    exited_ = true;
    return false;
  }
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  NotifySocket& notify() { return *notify_; }
  std::string log() const {
    std::ifstream in(logPath_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Sends `signo` and waits (bounded) for the exit status; -1 on timeout.
  int stop(int signo = SIGTERM, std::chrono::seconds timeout = std::chrono::seconds(30)) {
    ::kill(pid_, signo);
    return waitExit(timeout);
  }
  int waitExit(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  // Resident memory of the daemon in KiB (VmRSS).
  long rssKiB() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path dir_;
  std::string socket_, logPath_;
  std::unique_ptr<NotifySocket> notify_;
  pid_t pid_ = -1;
  bool ready_ = false;
  bool exited_ = false;
};

// A plain socket connected to `path` (no protocol on it yet); -1 when the connect fails.
inline int rawConnect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One RPC connection (a capability stream, so it can pass file descriptors).
class RpcConnection {
 public:
  RpcConnection(kj::AsyncIoContext& io, const std::string& socketPath) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socketPath.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      throw std::runtime_error("cannot connect to " + socketPath);
    }
    stream_ = io.lowLevelProvider->wrapUnixSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    client_ = kj::heap<capnp::TwoPartyClient>(*stream_, 1);
    daemon_ = client_->bootstrap().castAs<rpc::Daemon>();
  }
  rpc::Daemon::Client& daemon() { return daemon_; }

 private:
  kj::Own<kj::AsyncCapabilityStream> stream_;
  kj::Own<capnp::TwoPartyClient> client_;
  rpc::Daemon::Client daemon_ = nullptr;
};

// A File capability carrying an open descriptor.
class FdFile final : public rpc::File::Server {
 public:
  explicit FdFile(int fd) : fd_(fd) {}
  ~FdFile() { ::close(fd_); }
  kj::Maybe<int> getFd() override { return fd_; }

 private:
  int fd_;
};

// Collects streamed tokens; optionally acknowledges each chunk only after a delay (a slow reader).
class CollectingSink final : public rpc::TokenSink::Server {
 public:
  struct State {
    std::vector<int32_t> ids;
    std::string text;
    int chunks = 0;
  };
  CollectingSink(std::shared_ptr<State> state, kj::Timer* timer = nullptr, kj::Duration delay = 0 * kj::MILLISECONDS)
      : state_(std::move(state)), timer_(timer), delay_(delay) {}
  kj::Promise<void> tokens(TokensContext context) override {
    auto p = context.getParams();
    for (int32_t id : p.getIds()) state_->ids.push_back(id);
    state_->text += p.getText().cStr();
    state_->chunks++;
    if (timer_ && delay_ > 0 * kj::MILLISECONDS) return timer_->afterDelay(delay_);
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<State> state_;
  kj::Timer* timer_;
  kj::Duration delay_;
};

// The stories260K greedy golden for "Once upon a time" (tests/goldens/stories260K_greedy.txt).
inline std::vector<int32_t> storiesGolden() {
  std::ifstream in(std::string(JITLLM_GOLDENS_DIR) + "/stories260K_greedy.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("greedy_tokens: ", 0) == 0) {
      std::vector<int32_t> ids;
      std::istringstream s(line.substr(15));
      for (int32_t id; s >> id;) ids.push_back(id);
      return ids;  // the first block is "Once upon a time"
    }
  }
  return {};
}

}  // namespace jitllm::testing
