// jitllmctl: the command-line client of jitllmd. Everything but the process's streams lives in
// the jitllm_ctl library (commands.h), so tests drive it in-process too.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "ctl/commands.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  jitllm::ctl::Terminal terminal;
  terminal.stdinIsTty = ::isatty(STDIN_FILENO) == 1;
  terminal.stdoutIsTty = ::isatty(STDOUT_FILENO) == 1;
  terminal.stderrIsTty = ::isatty(STDERR_FILENO) == 1;
  return jitllm::ctl::runJitllmctl(args, std::cin, std::cout, std::cerr, terminal);
}
