// The command table and the dispatch around it: usage and version, and turning exceptions into
// messages and exit statuses.
#include "ctl/commands.h"

#include <iostream>

#include "ctl/json_writer.h"

namespace jitllm::ctl {
namespace {

// Option specs shared by the generating commands.
const OptionSpec kMaxTokens{"-n", "N", "tokens to generate at most (default: 128 for run, 256 per chat reply)"};
const OptionSpec kTemperature{"--temperature", "T", "sampling temperature; 0 (default) is greedy"};
const OptionSpec kSeed{"--seed", "S", "sampling seed (default 0)"};
const OptionSpec kTopK{"--top-k", "K", "sample from the K most likely tokens only (0: all)"};
const OptionSpec kTopP{"--top-p", "P", "nucleus sampling threshold (default 1: off)"};
const OptionSpec kStop{"--stop", "TEXT", "stop before this text (repeatable)", true};
const OptionSpec kContext{"--ctx", "N", "context limit of the session (default: the model's)"};
const OptionSpec kTier{"--tier", "TIER",
                       "interactive, standard or batch (default: yours, from jitllmd's config; only admins may "
                       "ask for a more urgent one)"};
const OptionSpec kReadDelay{"--read-delay-ms", "N",
                            "read slowly: wait N ms after each chunk (demos; tests of the daemon's flow control)"};
constexpr std::string_view kMigrateHelp =
    "  LAYERS: none = every unit; 3 = blk.3; 0-5 = blk.0..blk.5; an end may also be token_embd (embd)\n"
    "  or output (head), e.g. token_embd-output, 20-output. A NAME with ':' in it: NAME: or NAME:LAYERS.\n"
    "  Interrupted (Ctrl-C) before its commit, the migration is cancelled and nothing moves.\n";
constexpr std::string_view kTensorParallelHelp =
    "  K: 1, 2 or 4. DEVICES: K comma-separated devices, the first keeping the hidden state (e.g.\n"
    "  cuda:0,cuda:1); none: the device the first block runs on and the next ones of its backend.\n"
    "  Each device runs its share of the attention heads (with their KV cache) and of the FFN rows;\n"
    "  K 1 joins a split model back onto one device. The embedding and head are not split.\n"
    "  Interrupted (Ctrl-C) before its commit, the switch is cancelled and nothing changes.\n";
// pin and unpin: the LAYERS lines alone.
constexpr std::string_view kLayersHelp = kMigrateHelp.substr(0, kMigrateHelp.find("  Interrupted"));

// What anyone may ask: the daemon, its devices and models, generations, events.
std::vector<CommandSpec> servingCommands() {
  return {
      {.name = "status", .summary = "is jitllmd running: its version, socket and what it holds", .run = runStatus},
      {.name = "devices", .summary = "the devices jitllmd owns, their memory and telemetry", .run = runDevices},
      {.name = "ps",
       .arguments = "[NAME]",
       .maxArguments = 1,
       .summary = "resident models (or model NAME): layer placement by device, memory, sessions",
       .options = {{"-l", "", "the state of each unit: device, residency, weights, kernels, pin, KV pages"}},
       .run = runPs},
      {.name = "load",
       .arguments = "FILE",
       .minArguments = 1,
       .maxArguments = 1,
       .summary = "load a model (admin); this client opens FILE and passes it to the daemon",
       .options = {{"--name", "NAME", "the model's name (default: from the file)"},
                   {"--ctx", "N", "default context limit of its sessions"},
                   {"--devices", "SPEC", "where to place its layers, e.g. cpu:0 or cpu:0,cpu:1"},
                   {"--kv", "f32|f16", "KV cache precision (default f32)"},
                   {"--max-vram", "SIZE", "at most this much of each GPU for it (weights + KV), e.g. 2G"},
                   {"--daemon-path", "", "send the path instead; the daemon opens it under its model directories"}},
       .run = runLoad},
      {.name = "unload",
       .arguments = "NAME",
       .minArguments = 1,
       .maxArguments = 1,
       .summary = "unload a model (admin); its sessions end",
       .run = runUnload},
      {.name = "run",
       .arguments = "NAME PROMPT",
       .minArguments = 2,
       .maxArguments = 2,
       .summary = "generate from PROMPT, streaming the text as it comes",
       .options = {kMaxTokens, kTemperature, kSeed, kTopK, kTopP, kStop, kContext, kTier, kReadDelay},
       .run = runRun},
      {.name = "chat",
       .arguments = "NAME",
       .minArguments = 1,
       .maxArguments = 1,
       .summary = "chat: each line read from stdin is a user turn; history is kept",
       .options = {{"--system", "TEXT", "a system message first"},
                   kMaxTokens,
                   kTemperature,
                   kSeed,
                   kTopK,
                   kTopP,
                   kStop,
                   kContext,
                   kTier},
       .run = runChat},
      {.name = "events",
       .summary = "recent daemon, device, model, session and migration events",
       .options = {{"--follow", "", "keep printing new events until interrupted"},
                   {"--replay", "N", "how many recent events first (default 100; 10 with --follow)"}},
       .run = runEvents},
      {.name = "cancel",
       .arguments = "SESSION",
       .minArguments = 1,
       .maxArguments = 1,
       .summary = "cancel a running session (yours; any, for an admin)",
       .run = runCancel},
  };
}

// Where layers run and what decides it (admins).
std::vector<CommandSpec> placementCommands() {
  return {
      {.name = "migrate",
       .arguments = "NAME[:LAYERS] DEVICE",
       .minArguments = 2,
       .maxArguments = 2,
       .summary = "move layers of a model to DEVICE while its sessions keep generating (admin)",
       .details = kMigrateHelp,
       .options = {{"--no-wait", "", "return once it has started; the outcome appears in `jitllmctl events`"},
                   {"--no-precopy", "", "copy all of the KV cache in the pause (default: most of it before)"},
                   {"--force", "", "move layers pinned elsewhere too; their pins follow them"}},
       .run = runMigrate},
      {.name = "tp",
       .arguments = "NAME[:LAYERS] K [DEVICES]",
       .minArguments = 2,
       .maxArguments = 3,
       .summary = "split a model's blocks over K devices (tensor parallelism), or join them onto one, live (admin)",
       .details = kTensorParallelHelp,
       .options = {{"--no-wait", "", "return once it has started; the outcome appears in `jitllmctl events`"},
                   {"--no-precopy", "", "re-lay all of the KV cache in the pause (default: most of it before)"},
                   {"--partial-sums", "",
                    "split the output and down projections too (less work on the first device; logits within "
                    "rounding of one device's instead of its exact bits)"},
                   {"--force", "", "split layers pinned elsewhere too"}},
       .run = runTensorParallel},
      {.name = "replicate",
       .arguments = "NAME DEVICE",
       .minArguments = 2,
       .maxArguments = 2,
       .summary = "a second copy of a model on DEVICE that shares its requests (data parallelism; admin)",
       .details = "  The replica is named NAME#2 (#3, ...); `jitllmctl unload NAME#2` drops it, unloading NAME\n"
                  "  drops its replicas too. Requests for NAME go to the copy with the fewest jobs.\n",
       .run = runReplicate},
      {.name = "pin",
       .arguments = "NAME[:LAYERS] DEVICE",
       .minArguments = 2,
       .maxArguments = 2,
       .summary = "pin layers of a model to DEVICE, moving them there first (admin)",
       .details = kLayersHelp,
       .run = runPin},
      {.name = "unpin",
       .arguments = "NAME[:LAYERS]",
       .minArguments = 1,
       .maxArguments = 1,
       .summary = "let pinned layers of a model move again (admin)",
       .details = kLayersHelp,
       .run = runUnpin},
      {.name = "policy",
       .arguments = "[NAME]",
       .minArguments = 0,
       .maxArguments = 1,
       .summary = "show the scheduler's policy, or switch to NAME (admin)",
       .run = runPolicy},
  };
}

const std::vector<CommandSpec>& table() {
  static const std::vector<CommandSpec> kTable = [] {
    std::vector<CommandSpec> all = servingCommands();
    for (CommandSpec& c : placementCommands()) all.push_back(std::move(c));
    return all;
  }();
  return kTable;
}

void printUsageError(const UsageError& e, std::ostream& err) {
  err << "jitllmctl: " << e.what() << "\n";
  if (!e.command().empty()) {
    for (const CommandSpec& c : commandTable()) {
      if (c.name == e.command()) err << commandUsage(c);
    }
  } else {
    err << "Try 'jitllmctl --help'.\n";
  }
}

}  // namespace

std::span<const CommandSpec> commandTable() { return table(); }

int runJitllmctl(std::span<const std::string> args, std::istream& in, std::ostream& out, std::ostream& err,
                 Terminal terminal) {
  ParsedCommandLine parsed;
  try {
    parsed = parseCommandLine(args, commandTable());
  } catch (const UsageError& e) {
    printUsageError(e, err);
    return 2;
  }
  if (parsed.version) {
    if (parsed.json) {
      JsonWriter j;
      j.beginObject()
          .field("version", client::libraryVersion())
          .field("protocol", client::kProtocolVersion)
          .endObject();
      out << j.str() << "\n";
    } else {
      out << "jitllmctl " << client::libraryVersion() << " (protocol " << client::kProtocolVersion << ")\n";
    }
    return 0;
  }
  if (parsed.help) {
    out << (parsed.command ? commandUsage(*parsed.command) : generalUsage(commandTable()));
    return 0;
  }
  if (parsed.command == nullptr) {
    err << "jitllmctl: no command given\n" << generalUsage(commandTable());
    return 2;
  }
  Context context{parsed, in, out, err, terminal};
  try {
    return parsed.command->run(context);
  } catch (const UsageError& e) {
    printUsageError(e, err);
    return 2;
  } catch (const client::Error& e) {
    out.flush();
    if (parsed.json) {
      JsonWriter j;
      j.beginObject().key("error").beginObject();
      j.field("kind", client::errorKindName(e.kind())).field("message", e.message());
      j.endObject().endObject();
      out << j.str() << "\n";
    }
    err << "jitllmctl: " << e.message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    out.flush();
    err << "jitllmctl: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace jitllm::ctl
