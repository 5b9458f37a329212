#include "process_runner.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace jitllm::testing {
namespace {

[[noreturn]] void execChild(const std::string& program, const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& setEnv, const std::vector<std::string>& unsetEnv,
                            int uid = -1, int gid = -1) {
  if (gid >= 0 && (::setgroups(0, nullptr) != 0 || ::setgid(gid_t(gid)) != 0)) ::_exit(126);
  if (uid >= 0 && ::setuid(uid_t(uid)) != 0) ::_exit(126);
  for (const auto& [k, v] : setEnv) ::setenv(k.c_str(), v.c_str(), 1);
  for (const auto& k : unsetEnv) ::unsetenv(k.c_str());
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  std::fprintf(stderr, "exec %s: %s\n", program.c_str(), std::strerror(errno));
  ::_exit(127);
}

void decodeStatus(int status, int* exitCode, int* sig) {
  if (WIFEXITED(status)) {
    *exitCode = WEXITSTATUS(status);
    *sig = 0;
  } else if (WIFSIGNALED(status)) {
    *exitCode = -1;
    *sig = WTERMSIG(status);
  }
}

}  // namespace

ProcessResult runProcess(const std::string& program, const std::vector<std::string>& args,
                         const ProcessOptions& options) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    execChild(program, args, options.setEnv, options.unsetEnv, options.runAsUid, options.runAsGid);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::signal(SIGPIPE, SIG_IGN);  // a child that exits early must not take the test down
  ProcessResult result;
  size_t written = 0;
  int stdinFd = in[1];
  if (options.stdinData.empty()) {
    ::close(stdinFd);
    stdinFd = -1;
  } else {
    ::fcntl(stdinFd, F_SETFL, O_NONBLOCK);
  }
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool outOpen = true, errOpen = true;
  while (outOpen || errOpen) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timedOut = true;
      ::kill(pid, SIGKILL);
      break;
    }
    struct pollfd fds[3];
    int n = 0;
    if (outOpen) fds[n++] = {out[0], POLLIN, 0};
    if (errOpen) fds[n++] = {err[0], POLLIN, 0};
    if (stdinFd >= 0) fds[n++] = {stdinFd, POLLOUT, 0};
    if (::poll(fds, nfds_t(n), int(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; i++) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == stdinFd) {
        const ssize_t w = ::write(stdinFd, options.stdinData.data() + written, options.stdinData.size() - written);
        if (w > 0) written += size_t(w);
        if (w < 0 || written == options.stdinData.size()) {
          ::close(stdinFd);
          stdinFd = -1;
        }
        continue;
      }
      char buf[65536];
      const ssize_t r = ::read(fds[i].fd, buf, sizeof(buf));
      std::string& sink = fds[i].fd == out[0] ? result.out : result.err;
      if (r > 0) {
        sink.append(buf, size_t(r));
      } else {
        (fds[i].fd == out[0] ? outOpen : errOpen) = false;
      }
    }
  }
  if (stdinFd >= 0) ::close(stdinFd);
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  decodeStatus(status, &result.exitCode, &result.signal);
  return result;
}

BackgroundProcess::BackgroundProcess(const std::string& program, const std::vector<std::string>& args,
                                     const std::string& logPath, const std::map<std::string, std::string>& setEnv)
    : logPath_(logPath) {
  const int logFd = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (logFd < 0) throw std::runtime_error("cannot create " + logPath);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that crashes takes its daemon along
    const int devNull = ::open("/dev/null", O_RDONLY);
    ::dup2(devNull, 0);
    ::dup2(logFd, 1);
    ::dup2(logFd, 2);
    execChild(program, args, setEnv, {});
  }
  ::close(logFd);
}

BackgroundProcess::~BackgroundProcess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

bool BackgroundProcess::running() {
  if (reaped_) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

int BackgroundProcess::stop(int sig, std::chrono::milliseconds timeout) {
  if (running()) ::kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
      return -2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int code = 0, s = 0;
  decodeStatus(status_, &code, &s);
  return code;
}

std::string BackgroundProcess::log() const {
  std::ifstream in(logPath_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace jitllm::testing
