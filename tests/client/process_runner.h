// Runs a program with arguments, feeds it stdin, captures stdout and stderr, and kills it if it
// runs past a deadline, so that a hung client or daemon fails a test instead of hanging CI.
//
// Thread-safety: free functions; each call owns its child.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/scoped_test_state.h"  // TempDir, which these tests use with it

namespace jitllm::testing {

struct ProcessResult {
  int exitCode = -1;  // -1 when killed by a signal (then `signal` says which)
  int signal = 0;
  bool timedOut = false;
  std::string out;
  std::string err;
};

struct ProcessOptions {
  std::string stdinData = {};
  std::chrono::milliseconds timeout{30000};
  std::map<std::string, std::string> setEnv = {};  // added to (or replacing in) the environment
  std::vector<std::string> unsetEnv = {};
  // >= 0: the child drops to this uid/gid (and no supplementary groups) before exec; needs root.
  int runAsUid = -1;
  int runAsGid = -1;
};

ProcessResult runProcess(const std::string& program, const std::vector<std::string>& args,
                         const ProcessOptions& options = {});

// A child left running (a daemon): started with its output in files, stopped with a signal.
class BackgroundProcess final {
 public:
  BackgroundProcess(const std::string& program, const std::vector<std::string>& args, const std::string& logPath,
                    const std::map<std::string, std::string>& setEnv = {});
  ~BackgroundProcess();  // SIGKILL if still running
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  int pid() const { return pid_; }
  bool running();
  // Sends `sig` and waits up to `timeout` for the exit; returns the exit code, -1 on a signal
  // death, -2 if it did not exit in time (then it is killed).
  int stop(int sig, std::chrono::milliseconds timeout);
  std::string log() const;

 private:
  int pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::string logPath_;
};

}  // namespace jitllm::testing
