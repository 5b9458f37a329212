#include "ctl/command_line.h"

#include <algorithm>

namespace jitllm::ctl {
namespace {

const CommandSpec* findCommand(std::span<const CommandSpec> table, std::string_view name) {
  for (const CommandSpec& c : table) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const OptionSpec* findOption(const CommandSpec& command, std::string_view name) {
  for (const OptionSpec& o : command.options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

}  // namespace

std::string ParsedCommandLine::value(std::string_view option, std::string fallback) const {
  auto it = options.find(option);
  return it == options.end() ? fallback : it->second.back();
}

std::vector<std::string> ParsedCommandLine::values(std::string_view option) const {
  auto it = options.find(option);
  return it == options.end() ? std::vector<std::string>{} : it->second;
}

ParsedCommandLine parseCommandLine(std::span<const std::string> args, std::span<const CommandSpec> table) {
  ParsedCommandLine out;
  bool optionsEnded = false;
  std::vector<std::string> pending;  // arguments before we know the command's spec
  auto commandName = [&] { return out.command ? std::string(out.command->name) : std::string(); };
  for (size_t i = 0; i < args.size(); i++) {
    std::string arg = args[i];
    const bool isOption = !optionsEnded && arg.size() > 1 && arg[0] == '-';
    if (!isOption) {
      if (out.command == nullptr) {
        const CommandSpec* c = findCommand(table, arg);
        if (c == nullptr) throw UsageError("unknown command '" + arg + "'");
        if (!c->reservedFor.empty()) {
          throw UsageError("'" + arg + "' is not available in this version of jitllmctl (" +
                           std::string(c->reservedFor) + ")");
        }
        out.command = c;
      } else {
        out.arguments.push_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      optionsEnded = true;
      continue;
    }
    // --name=value is the same as --name value.
    std::string inlineValue;
    bool hasInlineValue = false;
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        inlineValue = arg.substr(eq + 1);
        hasInlineValue = true;
        arg.resize(eq);
      }
    }
    auto takeValue = [&](std::string_view name) -> std::string {
      if (hasInlineValue) return inlineValue;
      if (i + 1 >= args.size()) throw UsageError(std::string(name) + " needs a value", commandName());
      return args[++i];
    };
    auto noValue = [&](std::string_view name) {
      if (hasInlineValue) throw UsageError(std::string(name) + " takes no value", commandName());
    };
    if (arg == "--json") {
      noValue(arg);
      out.json = true;
    } else if (arg == "--socket") {
      out.socket = takeValue(arg);
      if (out.socket.empty()) throw UsageError("--socket needs a path", commandName());
    } else if (arg == "-h" || arg == "--help") {
      noValue(arg);
      out.help = true;
    } else if (arg == "--version") {
      noValue(arg);
      out.version = true;
    } else if (out.command != nullptr && findOption(*out.command, arg) != nullptr) {
      const OptionSpec& o = *findOption(*out.command, arg);
      std::vector<std::string>& slot = out.options[std::string(o.name)];
      if (!slot.empty() && !o.repeatable) throw UsageError(arg + " given twice", commandName());
      if (o.valueName.empty()) {
        noValue(arg);
        slot.push_back("");
      } else {
        slot.push_back(takeValue(arg));
      }
    } else if (out.command == nullptr) {
      throw UsageError("unknown option " + arg + " (options of a command go after its name)");
    } else {
      throw UsageError("unknown option " + arg + " for '" + commandName() + "'", commandName());
    }
  }
  if (out.help || out.version || out.command == nullptr) return out;
  const CommandSpec& c = *out.command;
  if (out.arguments.size() < c.minArguments) {
    std::string message = std::string(c.name) + " needs " + std::string(c.arguments);
    // Some given: name what is missing ("migrate needs NAME[:LAYERS] DEVICE (DEVICE is missing)").
    std::vector<std::string_view> names;
    for (size_t start = 0; start < c.arguments.size();) {
      const size_t end = std::min(c.arguments.find(' ', start), c.arguments.size());
      if (end > start) names.push_back(c.arguments.substr(start, end - start));
      start = end + 1;
    }
    if (!out.arguments.empty() && names.size() >= c.minArguments) {
      std::string missing;
      for (size_t i = out.arguments.size(); i < c.minArguments; i++)
        (missing += missing.empty() ? "" : " ") += names[i];
      message += " (" + missing + (c.minArguments - out.arguments.size() == 1 ? " is" : " are") + " missing)";
    }
    throw UsageError(message, commandName());
  }
  if (out.arguments.size() > c.maxArguments) {
    throw UsageError("too many arguments for '" + commandName() + "': " + out.arguments[c.maxArguments] +
                         (c.maxArguments > 0 ? " (quote an argument that has spaces)" : ""),
                     commandName());
  }
  return out;
}

ModelLayers parseModelLayers(std::string_view argument, std::string_view command) {
  ModelLayers out;
  const size_t colon = argument.rfind(':');
  out.model = std::string(argument.substr(0, colon));
  if (colon != std::string_view::npos) out.layers = std::string(argument.substr(colon + 1));
  if (out.model.empty()) {
    throw UsageError("NAME[:LAYERS]: '" + std::string(argument) + "' names no model (e.g. stories:0-5)",
                     std::string(command));
  }
  return out;
}

std::string commandUsage(const CommandSpec& c) {
  std::string out = "usage: jitllmctl ";
  out += c.name;
  if (!c.arguments.empty()) (out += ' ') += c.arguments;
  if (!c.options.empty()) out += " [options]";
  out += "\n  " + std::string(c.summary) + "\n";
  out += c.details;
  size_t width = std::string_view("--socket PATH").size();
  for (const OptionSpec& o : c.options) width = std::max(width, o.name.size() + 1 + o.valueName.size());
  auto line = [&](std::string left, std::string_view help) {
    left.resize(std::max(left.size(), width), ' ');
    out += "  " + left + "  " + std::string(help) + "\n";
  };
  if (!c.options.empty()) out += "options:\n";
  for (const OptionSpec& o : c.options) {
    std::string left(o.name);
    if (!o.valueName.empty()) (left += ' ') += o.valueName;
    line(left, o.help);
  }
  out += "global options:\n";
  line("--json", "machine-readable output: one JSON document per result");
  line("--socket PATH", "the daemon's socket (default: $JITLLM_SOCKET, your own jitllmd, /run/jitllm/jitllmd.sock)");
  return out;
}

std::string generalUsage(std::span<const CommandSpec> table) {
  std::string out =
      "usage: jitllmctl [--json] [--socket PATH] COMMAND [ARGS] [options]\n"
      "       jitllmctl --help | --version | COMMAND --help\n"
      "Talks to jitllmd, the jitllm model daemon.\n\ncommands:\n";
  size_t width = 0;
  for (const CommandSpec& c : table) {
    if (c.reservedFor.empty()) width = std::max(width, c.name.size() + 1 + c.arguments.size());
  }
  for (const CommandSpec& c : table) {
    if (!c.reservedFor.empty()) continue;
    std::string left(c.name);
    if (!c.arguments.empty()) (left += ' ') += c.arguments;
    left.resize(width, ' ');
    out += "  " + left + "  " + std::string(c.summary) + "\n";
  }
  out +=
      "\nglobal options (anywhere on the line):\n"
      "  --json         machine-readable output: one JSON document per result (per line for streams)\n"
      "  --socket PATH  the daemon's socket; default: $JITLLM_SOCKET, else your own jitllmd's\n"
      "                 ($XDG_RUNTIME_DIR/jitllm/jitllmd.sock) if it runs, else /run/jitllm/jitllmd.sock\n"
      "  -h, --help     this text, or a command's options with COMMAND --help\n"
      "  --version      jitllmctl's version and protocol\n"
      "\nexit status: 0 ok, 1 error (the message says what to do), 2 bad usage\n";
  return out;
}

}  // namespace jitllm::ctl
