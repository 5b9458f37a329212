// jitllmctl's command line: global options (anywhere: --json, --socket PATH, --help, --version),
// one command from the command table, its positional arguments and its options, each checked
// against the command's spec so that a typo is a usage error (exit 2), never a silent default.
//
// Thread-safety: values and pure functions.
#pragma once

#include <charconv>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::ctl {

// Bad usage: jitllmctl prints it with the command's usage and exits 2.
class UsageError final : public std::runtime_error {
 public:
  UsageError(const std::string& message, std::string command = {})
      : std::runtime_error(message), command_(std::move(command)) {}
  // The command whose usage to show; empty: the general usage.
  const std::string& command() const { return command_; }

 private:
  std::string command_;
};

struct OptionSpec {
  std::string_view name = {};       // "--name", "-n"
  std::string_view valueName = {};  // "N", "PATH"; empty: a flag without a value
  std::string_view help = {};
  bool repeatable = false;
};

struct ParsedCommandLine;
struct Context;
using CommandHandler = int (*)(Context& context);

struct CommandSpec {
  std::string_view name = {};
  std::string_view arguments = {};  // "NAME PROMPT"; shown in usage
  size_t minArguments = 0;
  size_t maxArguments = 0;
  std::string_view summary = {};
  std::string_view details = {};  // more lines for `COMMAND --help` (each ends with '\n')
  std::vector<OptionSpec> options = {};
  CommandHandler run = nullptr;
  // Non-empty: the name is kept for a later version (what it will do); using it is a usage error.
  std::string_view reservedFor = {};
};

struct ParsedCommandLine {
  const CommandSpec* command = nullptr;  // null when only global options were given
  std::vector<std::string> arguments;
  std::map<std::string, std::vector<std::string>, std::less<>> options;  // "" for flags
  bool json = false;
  bool help = false;
  bool version = false;
  std::string socket;  // empty: the default rule

  bool has(std::string_view option) const { return options.find(option) != options.end(); }
  // The last value given for `option`, or `fallback`.
  std::string value(std::string_view option, std::string fallback = {}) const;
  std::vector<std::string> values(std::string_view option) const;
  // The option's value parsed strictly as a T (trailing junk, overflow: UsageError).
  template <typename T>
  T number(std::string_view option, T fallback) const;
  // An argument parsed strictly as a T.
  template <typename T>
  T argumentNumber(size_t index, std::string_view what) const;
};

// Parses argv[1..]. UsageError for an unknown command or option, a missing option value, the
// wrong number of arguments, or a reserved command.
ParsedCommandLine parseCommandLine(std::span<const std::string> args, std::span<const CommandSpec> table);

// A NAME[:LAYERS] argument (migrate, pin, unpin): the model and the layer range the daemon parses
// ("" = every unit, "3", "0-5", "20-output"). Split at the last ':', so that a model whose name
// has a ':' is written "NAME:" for every unit or "NAME:LAYERS". UsageError naming `command` when
// the name is empty.
struct ModelLayers {
  std::string model;
  std::string layers;
};
ModelLayers parseModelLayers(std::string_view argument, std::string_view command);

// Usage texts built from the table.
std::string generalUsage(std::span<const CommandSpec> table);
std::string commandUsage(const CommandSpec& command);

// Strict number parsing: the whole text, in range. UsageError naming `what` otherwise.
template <typename T>
T parseNumber(std::string_view text, std::string_view what) {
  T out{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if constexpr (std::is_floating_point_v<T>) {
    auto [p, ec] = std::from_chars(first, last, out);
    if (ec != std::errc() || p != last || text.empty()) {
      throw UsageError(std::string(what) + ": '" + std::string(text) + "' is not a number");
    }
  } else {
    auto [p, ec] = std::from_chars(first, last, out);
    if (ec == std::errc::result_out_of_range) {
      throw UsageError(std::string(what) + ": '" + std::string(text) + "' is out of range");
    }
    if (ec != std::errc() || p != last || text.empty()) {
      throw UsageError(std::string(what) + ": '" + std::string(text) + "' is not a whole number");
    }
  }
  return out;
}

template <typename T>
T ParsedCommandLine::number(std::string_view option, T fallback) const {
  auto it = options.find(option);
  if (it == options.end()) return fallback;
  return parseNumber<T>(it->second.back(), option);
}

template <typename T>
T ParsedCommandLine::argumentNumber(size_t index, std::string_view what) const {
  return parseNumber<T>(arguments.at(index), what);
}

}  // namespace jitllm::ctl
