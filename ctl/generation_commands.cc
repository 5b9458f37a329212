// run, chat and cancel.
#include <chrono>
#include <istream>
#include <ostream>
#include <thread>

#include "ctl/commands.h"
#include "ctl/json_views.h"
#include "ctl/text_format.h"

namespace jitllm::ctl {
namespace {

client::SamplingParams samplingFrom(const ParsedCommandLine& a) {
  client::SamplingParams s;
  s.temperature = a.number<float>("--temperature", 0.0f);
  s.seed = a.number<uint64_t>("--seed", 0);
  s.topK = a.number<int32_t>("--top-k", 0);
  s.topP = a.number<float>("--top-p", 1.0f);
  if (!(s.temperature >= 0))
    throw UsageError("--temperature must be >= 0", a.command ? std::string(a.command->name) : "");
  if (s.topK < 0) throw UsageError("--top-k must be >= 0", std::string(a.command->name));
  if (!(s.topP > 0 && s.topP <= 1)) throw UsageError("--top-p must be in (0, 1]", std::string(a.command->name));
  return s;
}

// --read-delay-ms: how long the token callback sleeps after each chunk, a deliberately slow reader
// (the daemon's flow control then holds the session back: `waiting` in `ps`). A minute at most.
std::chrono::milliseconds readDelayFrom(const ParsedCommandLine& a) {
  const std::string command(a.command->name);
  uint32_t ms = 0;
  try {
    ms = a.number<uint32_t>("--read-delay-ms", 0);
  } catch (const UsageError& e) {
    throw UsageError(e.what(), command);
  }
  if (ms > 60000) throw UsageError("--read-delay-ms must be at most 60000 (a minute per chunk)", command);
  return std::chrono::milliseconds(ms);
}

// Streams reply text to `out` as it arrives, remembering whether the line is still open; with a
// read delay, takes its time over each chunk.
struct TextStream {
  std::ostream& out;
  std::chrono::milliseconds readDelay{0};
  bool lineOpen = false;

  bool operator()(std::span<const int32_t>, std::string_view text) {
    if (!text.empty()) {
      out << text << std::flush;
      lineOpen = text.back() != '\n';
    }
    if (readDelay.count() > 0) std::this_thread::sleep_for(readDelay);
    return bool(out);  // stdout gone (a closed pipe): stop generating
  }
  void endLine() {
    if (lineOpen) out << "\n" << std::flush;
    lineOpen = false;
  }
};

}  // namespace

int runRun(Context& c) {
  client::GenerateRequest request;
  request.model = c.args.arguments[0];
  request.prompt = c.args.arguments[1];
  request.maxTokens = c.args.number<uint32_t>("-n", request.maxTokens);
  request.sampling = samplingFrom(c.args);
  request.stop = c.args.values("--stop");
  request.contextSize = c.args.number<uint32_t>("--ctx", 0);
  request.tier = c.args.value("--tier");
  const std::chrono::milliseconds readDelay = readDelayFrom(c.args);
  auto client = c.connect();
  if (c.args.json) {
    client::ChunkCallback slowReader;  // none unless asked: the reply comes at the end anyway
    if (readDelay.count() > 0) {
      slowReader = [readDelay](std::span<const int32_t>, std::string_view) {
        std::this_thread::sleep_for(readDelay);
        return true;
      };
    }
    const client::GenerateResult result = client.generate(request, slowReader);
    JsonWriter j;
    j.beginObject().field("model", request.model);
    writeResultFields(j, result);
    j.endObject();
    c.out << j.str() << "\n";
    return 0;
  }
  TextStream stream{c.out, readDelay};
  client::GenerateResult result;
  try {
    result = client.generate(request, std::ref(stream));
  } catch (...) {
    stream.endLine();  // the error message starts on a line of its own
    throw;
  }
  stream.endLine();
  if (c.terminal.stderrIsTty) c.err << "[" << statsLine(result.stats) << "]\n";
  return 0;
}

int runChat(Context& c) {
  client::ChatRequest request;
  request.model = c.args.arguments[0];
  request.maxTokens = c.args.number<uint32_t>("-n", request.maxTokens);
  request.sampling = samplingFrom(c.args);
  request.stop = c.args.values("--stop");
  request.contextSize = c.args.number<uint32_t>("--ctx", 0);
  request.tier = c.args.value("--tier");
  if (c.args.has("--system")) request.messages.push_back({"system", c.args.value("--system")});
  const bool interactive = c.terminal.stdinIsTty;
  auto client = c.connect();
  if (interactive) {
    c.err << "chatting with " << request.model << " (Ctrl-D ends; /reset forgets the conversation; /exit ends)\n";
  }
  std::string line;
  while (true) {
    if (interactive) c.err << "> " << std::flush;
    if (!std::getline(c.in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (interactive && line == "/exit") break;
    if (interactive && line == "/reset") {
      const bool hasSystem = !request.messages.empty() && request.messages.front().role == "system";
      request.messages.resize(hasSystem ? 1 : 0);
      c.err << "(conversation forgotten)\n";
      continue;
    }
    request.messages.push_back({"user", line});
    client::GenerateResult result;
    TextStream stream{c.out};
    try {
      if (c.args.json) {
        result = client.chat(request);
      } else {
        result = client.chat(request, std::ref(stream));
      }
    } catch (const client::Error& e) {
      stream.endLine();
      request.messages.pop_back();  // that turn did not happen
      // At a terminal a refused turn (e.g. the history outgrew the context) is worth a retry;
      // a script gets exit 1 at its first error.
      if (!interactive || e.kind() == client::ErrorKind::kDisconnected) throw;
      c.err << "jitllmctl: " << e.message() << "\n";
      continue;
    }
    request.messages.push_back({"assistant", result.text});
    if (c.args.json) {
      JsonWriter j;
      j.beginObject().field("role", "assistant").field("content", result.text);
      writeResultFields(j, result);
      j.endObject();
      c.out << j.str() << "\n" << std::flush;  // one JSON object per reply, one per line
    } else {
      stream.endLine();
      if (interactive && c.terminal.stderrIsTty) c.err << "[" << statsLine(result.stats) << "]\n";
    }
  }
  if (interactive) c.err << "\n";
  return 0;
}

int runCancel(Context& c) {
  const uint64_t session = c.args.argumentNumber<uint64_t>(0, "SESSION");
  auto client = c.connect();
  client.cancelSession(session);
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().field("cancelled", session).endObject();
    c.out << j.str() << "\n";
  } else {
    c.out << "cancelled session " << session << "\n";
  }
  return 0;
}

}  // namespace jitllm::ctl
