// jitllmctl's commands: the table (names, arguments, options, handlers) and what a handler gets.
//
// Each handler returns the exit status (0) or throws: UsageError (exit 2), client::Error (exit 1,
// its message printed as is, since the library's messages already say what to do).
//
// Thread-safety: one Context per run of jitllmctl.
#pragma once

#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ctl/command_line.h"
#include "jitllm/client.h"

namespace jitllm::ctl {

struct Terminal {
  bool stdinIsTty = false;
  bool stdoutIsTty = false;
  bool stderrIsTty = false;
};

struct Context {
  const ParsedCommandLine& args;
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
  Terminal terminal;

  // Connects to the daemon (--socket, else the default rule); throws client::Error.
  client::Client connect() const { return client::Client::connect(args.socket); }
};

// Every command, including the names reserved for later versions.
std::span<const CommandSpec> commandTable();

// A whole run of jitllmctl on argv[1..]: parses, dispatches, prints errors. Returns the exit
// status: 0 ok, 1 error, 2 usage.
int runJitllmctl(std::span<const std::string> args, std::istream& in, std::ostream& out, std::ostream& err,
                 Terminal terminal);

// The handlers, grouped by what they touch (info_commands.cc, model_commands.cc,
// generation_commands.cc, migration_commands.cc).
int runStatus(Context& c);
int runDevices(Context& c);
int runPs(Context& c);
int runEvents(Context& c);
int runLoad(Context& c);
int runUnload(Context& c);
int runRun(Context& c);
int runChat(Context& c);
int runCancel(Context& c);
int runPolicy(Context& c);
int runMigrate(Context& c);
int runTensorParallel(Context& c);
int runReplicate(Context& c);
int runPin(Context& c);
int runUnpin(Context& c);

}  // namespace jitllm::ctl
