// jitllm-serve-bench: serving measured through the daemon - N clients, each on its own connection
// to jitllmd over the real socket, each asking for G tokens after a P-token prompt at once - and
// the figures a user feels: aggregate tokens per second, time to first token and time per output
// token (p50 and p99), and how busy the daemon kept its devices.
//
// It drives a running jitllmd (--socket) or starts one (--start MODEL.gguf, on a private socket,
// stopped at the end). The clients all run on one thread's event loop (Cap'n Proto's asynchronous
// API), so the measuring side costs a few percent of a core even at 64 clients.
//
// --check makes it a correctness tool rather than a benchmark: every prompt is first answered
// alone, then the concurrent replies must be those tokens exactly (greedy decoding: a session's
// tokens do not depend on what else is in the batch).
//
// --trace FILE replays a mixed workload instead (serve_trace.h: requests arriving at their times,
// each in its service tier) and reports per tier what the tiers promise: TTFT and time per output
// token (p50, p99), throughput, and goodput - the replies that met the daemon's targets for their
// tier, per second (docs/tiers.md). --make-trace FILE writes such a trace.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "jitllm/client.h"
#include "jitllm/client_capnp.h"
#include "tools/command_line.h"
#include "tools/http_completion_stream.h"
#include "tools/serve_trace.h"

namespace jitllm::tools {
namespace {

constexpr const char* kUsage = R"(usage: jitllm-serve-bench (--socket PATH | --start MODEL.gguf) [options]
  --socket PATH     a running jitllmd (default: the usual socket rule)
  --start FILE      start a jitllmd of our own on a private socket and load FILE into it
                    (reported: the load's seconds and the first request's TTFT after it)
  --devices SPEC    with --start: the daemon's devices (default cpu:0)
  --threads N       with --start: threads per CPU device (default: all cores)
  --model NAME      the loaded model to ask (default: the only one, or the one --start loaded)
  -c N              concurrent clients (default 8); a list "1,8,32" runs each in turn
  -p N              prompt tokens per client (default 16)
  -n N              tokens to generate per client (default 128; end-of-generation tokens do not stop them)
  -r N              rounds per client count, the best kept (default 1)
  --warmup          one round first, not counted (kernels compiled, buffers sized)
  --check           verify every reply against the same prompt answered alone; exit 1 on a mismatch
  --http PATH       the clients stream /v1/completions over jitllmd's HTTP Unix socket at PATH
                    instead of calling generate over Cap'n Proto (the same prompts and lengths):
                    what HTTP costs next to RPC (tools/bench/http_vs_rpc.sh)
  --json            one JSON object per client count instead of the table
  --trace FILE      replay a trace (tools/serve_trace.h) and report per service tier: TTFT and TPOT
                    p50/p99, tokens/s, replies that met the daemon's targets for their tier (goodput)
  --tier-scheduling on|off
                    with --start: the daemon's tier_scheduling (off: first come, first served)
  --make-trace FILE write a trace and exit: --duration S (30), --interactive-rate R (1/s),
                    --interactive-prompt P (64), --interactive-tokens G (64), --batch-jobs N (16, waiting
                    at the start), --batch-rate R (0/s), --batch-prompt P (512), --batch-tokens G (256),
                    --seed S (1); lengths uniform in [mean/2, 3 mean/2], arrivals Poisson
)";

using Clock = std::chrono::steady_clock;

struct Options {
  std::string socket, start, devices = "cpu:0", model, http, trace, makeTrace, tierScheduling;
  TraceSpec traceSpec;
  int threads = 0;
  std::vector<int> clients = {8};
  int promptTokens = 16, genTokens = 128, rounds = 1;
  bool warmup = false, check = false, json = false;
};

// One client's reply as it streamed.
struct Reply {
  std::vector<int32_t> ids;
  Clock::time_point sent, first, last;
  bool gotFirst = false;
  std::string error;
};

class TimingSink final : public rpc::TokenSink::Server {
 public:
  explicit TimingSink(Reply& reply) : reply_(reply) {}
  kj::Promise<void> tokens(TokensContext context) override {
    const auto now = Clock::now();
    const auto ids = context.getParams().getIds();
    if (ids.size() > 0) {
      if (!reply_.gotFirst) {
        reply_.first = now;
        reply_.gotFirst = true;
      }
      reply_.last = now;
    }
    return kj::READY_NOW;
  }

 private:
  Reply& reply_;
};

// Prompt `i`: P token ids drawn from the vocabulary with a fixed seed, different per client so
// that no client's prompt is a follow-up of another's (the daemon's idle sessions would skip it).
// `salt` makes each round's prompts new as well.
std::vector<int32_t> promptFor(int i, int tokens, uint32_t vocab, uint32_t salt) {
  std::mt19937 rng(1234567u + uint32_t(i) * 7919u + salt * 104729u);
  std::vector<int32_t> ids;
  for (int t = 0; t < tokens; t++) ids.push_back(int32_t(1 + rng() % (vocab - 1)));
  return ids;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5));
  return v[k];
}

struct RoundResult {
  double wallSeconds = 0;
  double aggregate = 0;  // generated tokens over the wall time, all clients
  double decode = 0;     // tokens after each first over the span from the first first token to the last token
  std::vector<double> ttftMs, tpotMs;
  double busy = -1;  // the devices' mean utilisation over the round, where the daemon reports it
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> errors;
};

// N clients at once, each on its own connection.
RoundResult runRound(const Options& o, const std::string& socket, const std::string& model, int n, uint32_t vocab,
                     uint32_t salt, kj::AsyncIoContext& io) {
  std::vector<kj::Own<client::DaemonConnection>> conns;
  for (int i = 0; i < n; i++) conns.push_back(client::DaemonConnection::connect(*io.lowLevelProvider, socket));
  auto busyConn = client::DaemonConnection::connect(*io.lowLevelProvider, socket);
  std::vector<Reply> replies(static_cast<size_t>(n));
  std::vector<StreamedCompletion> streams(static_cast<size_t>(n));
  kj::Vector<kj::Promise<void>> calls;
  const auto start = Clock::now();
  for (int i = 0; i < n && !o.http.empty(); i++) {
    const nlohmann::json request = {{"model", model},
                                    {"prompt", promptFor(i, o.promptTokens, vocab, salt)},
                                    {"max_tokens", o.genTokens},
                                    {"temperature", 0},
                                    {"ignore_eos", true},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}};
    std::string body = request.dump();
    StreamedCompletion& stream = streams[size_t(i)];
    Reply& reply = replies[size_t(i)];
    calls.add(streamCompletion(io.provider->getNetwork(), o.http, std::move(body), stream)
                  .then(
                      [&stream, &reply] {
                        reply.sent = stream.sent;
                        reply.first = stream.first;
                        reply.last = stream.last;
                        reply.gotFirst = stream.gotFirst;
                        reply.ids.assign(stream.tokens, 0);  // counted, not known: the stream carries text
                        reply.error = stream.error;
                      },
                      [&reply](kj::Exception&& e) { reply.error = e.getDescription().cStr(); }));
  }
  for (int i = 0; i < n && o.http.empty(); i++) {
    auto req = conns[size_t(i)]->daemon().generateRequest();
    auto r = req.initRequest();
    r.setModel(model);
    const auto prompt = promptFor(i, o.promptTokens, vocab, salt);
    auto t = r.initPrompt().initTokens(uint32_t(prompt.size()));
    for (size_t k = 0; k < prompt.size(); k++) t.set(uint32_t(k), prompt[k]);
    r.setMaxTokens(uint32_t(o.genTokens));
    r.setIgnoreEndOfGeneration(true);
    Reply& reply = replies[size_t(i)];
    req.setSink(kj::heap<TimingSink>(reply));
    reply.sent = Clock::now();
    calls.add(req.send().then(
        [&reply](capnp::Response<rpc::Daemon::GenerateResults>&& resp) {
          for (int32_t id : resp.getTokens()) reply.ids.push_back(id);
          if (!reply.gotFirst) reply.first = reply.last = Clock::now();
        },
        [&reply](kj::Exception&& e) { reply.error = e.getDescription().cStr(); }));
  }
  // The devices' utilisation, read every 200 ms while the clients run.
  std::vector<double> busy;
  bool done = false;
  auto all = kj::joinPromises(calls.releaseAsArray()).then([&done] { done = true; });
  auto sampleBusy = [&](auto& self) -> kj::Promise<void> {
    return io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).then([&] {
      if (done) return kj::Promise<void>(kj::READY_NOW);
      return busyConn->daemon().devicesRequest().send().then([&](capnp::Response<rpc::Daemon::DevicesResults>&& resp) {
        for (auto d : resp.getDevices()) {
          const float u = d.getTelemetry().getUtilization();
          if (d.getOnline() && u == u && u > 0) busy.push_back(u);
        }
        return self(self);
      });
    });
  };
  auto sampler = sampleBusy(sampleBusy).eagerlyEvaluate([](kj::Exception&&) {});
  all.wait(io.waitScope);
  const auto end = Clock::now();

  RoundResult out;
  out.wallSeconds = std::chrono::duration<double>(end - start).count();
  size_t tokens = 0, decodeTokens = 0;
  Clock::time_point firstFirst = end, lastLast = start;
  for (const Reply& r : replies) {
    out.ids.push_back(r.ids);
    out.errors.push_back(r.error);
    tokens += r.ids.size();
    if (r.ids.empty()) continue;
    out.ttftMs.push_back(std::chrono::duration<double, std::milli>(r.first - r.sent).count());
    if (r.ids.size() > 1) {
      out.tpotMs.push_back(std::chrono::duration<double, std::milli>(r.last - r.first).count() /
                           double(r.ids.size() - 1));
    }
    decodeTokens += r.ids.size() - 1;
    firstFirst = std::min(firstFirst, r.first);
    lastLast = std::max(lastLast, r.last);
  }
  out.aggregate = double(tokens) / out.wallSeconds;
  const double span = std::chrono::duration<double>(lastLast - firstFirst).count();
  out.decode = span > 0 ? double(decodeTokens) / span : 0;
  if (!busy.empty()) {
    double sum = 0;
    for (double b : busy) sum += b;
    out.busy = sum / double(busy.size());
  }
  return out;
}

// One traced request's reply.
struct TracedReply {
  TraceRequest request;
  Reply reply;
  bool done = false;
};

std::string readWholeFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UsageError("cannot read " + path);
  std::string text;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

// --trace: each request sent at its time on a connection of its own (closed when it ends), then
// per tier its latencies, throughput and goodput against the daemon's targets.
// `targets`: each tier's (TTFT, TPOT) targets in ms as the daemon holds them (0: none).
int replayTrace(const Options& o, const std::vector<TraceRequest>& trace, const std::string& socket,
                const std::string& model, uint32_t vocab, std::map<std::string, std::pair<double, double>> targets,
                kj::AsyncIoContext& io) {
  std::vector<TracedReply> replies(trace.size());
  kj::Vector<kj::Promise<void>> calls;
  const auto start = Clock::now();
  for (size_t i = 0; i < trace.size(); i++) {
    TracedReply& t = replies[i];
    t.request = trace[i];
    calls.add(io.provider->getTimer()
                  .afterDelay(int64_t(t.request.atMs * 1000.0) * kj::MICROSECONDS)
                  .then([&, i]() -> kj::Promise<void> {
                    auto conn = client::DaemonConnection::connect(*io.lowLevelProvider, socket);
                    auto req = conn->daemon().generateRequest();
                    auto r = req.initRequest();
                    r.setModel(model);
                    const auto prompt = promptFor(int(i), t.request.promptTokens, vocab, 77);
                    auto ids = r.initPrompt().initTokens(uint32_t(prompt.size()));
                    for (size_t k = 0; k < prompt.size(); k++) ids.set(uint32_t(k), prompt[k]);
                    r.setMaxTokens(uint32_t(t.request.maxTokens));
                    r.setIgnoreEndOfGeneration(true);
                    r.setTier(t.request.tier);
                    req.setSink(kj::heap<TimingSink>(t.reply));
                    t.reply.sent = Clock::now();
                    return req.send()
                        .then(
                            [&t](capnp::Response<rpc::Daemon::GenerateResults>&& resp) {
                              for (int32_t id : resp.getTokens()) t.reply.ids.push_back(id);
                              if (!t.reply.gotFirst) t.reply.first = t.reply.last = Clock::now();
                              t.done = true;
                            },
                            [&t](kj::Exception&& e) { t.reply.error = e.getDescription().cStr(); })
                        .attach(kj::mv(conn));
                  }));
  }
  kj::joinPromises(calls.releaseAsArray()).wait(io.waitScope);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  struct TierResult {
    size_t requests = 0, completed = 0, met = 0, failed = 0;
    size_t tokens = 0;
    std::vector<double> ttftMs, tpotMs;
  };
  std::map<std::string, TierResult> tiers;
  for (const TracedReply& t : replies) {
    TierResult& r = tiers[t.request.tier];
    r.requests++;
    if (!t.reply.error.empty() || !t.done) {
      r.failed++;
      std::fprintf(stderr, "%s request at %.0f ms: %s\n", t.request.tier.c_str(), t.request.atMs,
                   t.reply.error.c_str());
      continue;
    }
    r.completed++;
    r.tokens += t.reply.ids.size();
    const double ttft = std::chrono::duration<double, std::milli>(t.reply.first - t.reply.sent).count();
    const double tpot = t.reply.ids.size() > 1
                            ? std::chrono::duration<double, std::milli>(t.reply.last - t.reply.first).count() /
                                  double(t.reply.ids.size() - 1)
                            : 0;
    r.ttftMs.push_back(ttft);
    if (t.reply.ids.size() > 1) r.tpotMs.push_back(tpot);
    const auto [ttftTarget, tpotTarget] =
        targets.count(t.request.tier) ? targets[t.request.tier] : std::pair<double, double>{0, 0};
    const bool met =
        (ttftTarget <= 0 || ttft <= ttftTarget) && (tpotTarget <= 0 || t.reply.ids.size() < 2 || tpot <= tpotTarget);
    r.met += met;
  }
  if (!o.json) {
    std::printf("# jitllm-serve-bench --trace %s: model %s, %zu requests over %.1f s\n", o.trace.c_str(), model.c_str(),
                trace.size(), wall);
    std::printf(
        "| tier | requests | failed | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | tok/s | met | goodput /s "
        "|\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  size_t failed = 0;
  for (const auto& [tier, r] : tiers) {
    failed += r.failed;
    const double ttft50 = percentile(r.ttftMs, 50), ttft99 = percentile(r.ttftMs, 99);
    const double tpot50 = percentile(r.tpotMs, 50), tpot99 = percentile(r.tpotMs, 99);
    if (o.json) {
      std::printf(
          "{\"tier\": \"%s\", \"requests\": %zu, \"failed\": %zu, \"ttft_ms_p50\": %.2f, \"ttft_ms_p99\": %.2f, "
          "\"tpot_ms_p50\": %.3f, \"tpot_ms_p99\": %.3f, \"tok_s\": %.1f, \"met\": %zu, \"goodput_per_s\": %.3f, "
          "\"wall_s\": %.2f}\n",
          tier.c_str(), r.requests, r.failed, ttft50, ttft99, tpot50, tpot99, double(r.tokens) / wall, r.met,
          double(r.met) / wall, wall);
    } else {
      std::printf("| %s | %zu | %zu | %.1f | %.1f | %.2f | %.2f | %.1f | %zu | %.3f |\n", tier.c_str(), r.requests,
                  r.failed, ttft50, ttft99, tpot50, tpot99, double(r.tokens) / wall, r.met, double(r.met) / wall);
    }
  }
  return failed > 0 ? 1 : 0;
}

// A jitllmd of our own on a private socket, stopped (SIGTERM, then waited for) on destruction.
class OwnDaemon {
 public:
  OwnDaemon(const Options& o) {
    dir_ = std::filesystem::temp_directory_path() / ("jitllm-serve-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "jitllmd.sock").string();
    // Defaults only: an empty config of our own rather than the user's.
    const std::string config = (dir_ / "jitllmd.conf").string();
    std::FILE* file = std::fopen(config.c_str(), "w");
    if (file) {
      if (!o.tierScheduling.empty()) std::fprintf(file, "tier_scheduling = %s\n", o.tierScheduling.c_str());
      std::fclose(file);
    }
    // The jitllmd built beside this tool.
    std::string daemon = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "jitllmd";
    std::vector<std::string> args = {daemon,        "--socket", socket_,    "--devices", o.devices,
                                     "--log-level", "warn",     "--config", config};
    if (o.threads > 0) {
      args.push_back("--threads");
      args.push_back(std::to_string(o.threads));
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Connected once the socket answers.
    for (int i = 0; i < 600; i++) {
      try {
        auto c = client::Client::connect(socket_);
        return;
      } catch (const client::Error&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    throw std::runtime_error("jitllmd did not start on " + socket_);
  }
  ~OwnDaemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& socket() const { return socket_; }

 private:
  std::filesystem::path dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

int run(int argc, char** argv) {
  Options o;
  CommandLine args(argc, argv);
  while (!args.done()) {
    const std::string a = args.take();
    if (a == "--socket") {
      o.socket = args.value(a);
    } else if (a == "--start") {
      o.start = args.value(a);
    } else if (a == "--devices") {
      o.devices = args.value(a);
    } else if (a == "--threads") {
      o.threads = args.number<int>(a);
    } else if (a == "--model") {
      o.model = args.value(a);
    } else if (a == "-c") {
      o.clients = parseCounts(a, args.value(a), 4096);
    } else if (a == "-p") {
      o.promptTokens = args.number<int>(a);
    } else if (a == "-n") {
      o.genTokens = args.number<int>(a);
    } else if (a == "-r") {
      o.rounds = args.number<int>(a);
    } else if (a == "--warmup") {
      o.warmup = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--http") {
      o.http = args.value(a);
    } else if (a == "--trace") {
      o.trace = args.value(a);
    } else if (a == "--make-trace") {
      o.makeTrace = args.value(a);
    } else if (a == "--tier-scheduling") {
      o.tierScheduling = args.value(a);
      if (o.tierScheduling != "on" && o.tierScheduling != "off") throw UsageError("--tier-scheduling is on or off");
    } else if (a == "--duration") {
      o.traceSpec.seconds = args.number<double>(a);
    } else if (a == "--interactive-rate") {
      o.traceSpec.interactiveRate = args.number<double>(a);
    } else if (a == "--interactive-prompt") {
      o.traceSpec.interactivePrompt = args.number<int>(a);
    } else if (a == "--interactive-tokens") {
      o.traceSpec.interactiveTokens = args.number<int>(a);
    } else if (a == "--batch-jobs") {
      o.traceSpec.batchJobs = args.number<int>(a);
    } else if (a == "--batch-rate") {
      o.traceSpec.batchRate = args.number<double>(a);
    } else if (a == "--batch-prompt") {
      o.traceSpec.batchPrompt = args.number<int>(a);
    } else if (a == "--batch-tokens") {
      o.traceSpec.batchTokens = args.number<int>(a);
    } else if (a == "--seed") {
      o.traceSpec.seed = args.number<uint64_t>(a);
    } else {
      throw UsageError("unknown option '" + a + "'");
    }
  }
  if (!o.makeTrace.empty()) {
    const TraceSpec& s = o.traceSpec;
    if (s.seconds <= 0 || s.interactiveRate < 0 || s.batchRate < 0 || s.batchJobs < 0 || s.interactivePrompt < 1 ||
        s.interactiveTokens < 1 || s.batchPrompt < 1 || s.batchTokens < 1) {
      throw UsageError("trace lengths must be at least 1, rates and durations not negative");
    }
    const auto trace = makeTrace(s);
    std::FILE* f = std::fopen(o.makeTrace.c_str(), "w");
    if (!f) throw UsageError("cannot write " + o.makeTrace);
    const std::string text = formatTrace(trace);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    std::printf("wrote %s: %zu requests over %.0f s\n", o.makeTrace.c_str(), trace.size(), s.seconds);
    return 0;
  }
  if (o.promptTokens < 1 || o.genTokens < 1 || o.rounds < 1) throw UsageError("-p, -n and -r must be at least 1");
  if (!o.trace.empty() && (o.check || !o.http.empty())) throw UsageError("--trace runs over Cap'n Proto, unchecked");
  if (!o.start.empty() && !o.socket.empty()) throw UsageError("--socket or --start, not both");
  if (!o.http.empty() && o.check) throw UsageError("--check compares token ids, which an HTTP stream does not carry");

  // A trace is read before any daemon starts: a damaged one costs nothing.
  std::vector<TraceRequest> trace;
  if (!o.trace.empty()) {
    try {
      trace = parseTrace(readWholeFile(o.trace));
    } catch (const std::runtime_error& e) {
      throw UsageError(o.trace + ": " + e.what());
    }
  }
  std::unique_ptr<OwnDaemon> own;
  std::string socket = o.socket;
  if (!o.start.empty()) {
    own = std::make_unique<OwnDaemon>(o);
    socket = own->socket();
  }
  uint32_t vocab = 0;
  std::string model = o.model;
  std::map<std::string, std::pair<double, double>> targets;  // per tier, the daemon's (TTFT, TPOT) ms
  double loadSeconds = -1;
  {
    auto c = client::Client::connect(socket);
    if (!o.start.empty()) {
      client::LoadOptions lo;
      lo.name = o.model.empty() ? "bench" : o.model;
      const auto t0 = Clock::now();
      model = c.load(o.start, lo).name;
      loadSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const auto models = c.models();
    if (model.empty()) {
      if (models.size() != 1)
        throw UsageError("name the model with --model (the daemon has " + std::to_string(models.size()) + " loaded)");
      model = models[0].name;
    }
    for (const auto& m : models) {
      if (m.name != model) continue;
      vocab = m.vocabSize;
      for (const auto& g : m.goodput) targets[g.tier] = {g.ttftTargetMs, g.tpotTargetMs};
    }
    if (vocab == 0) throw UsageError("no model '" + model + "' is loaded");
  }

  auto io = kj::setupAsyncIo();
  if (!o.trace.empty()) return replayTrace(o, trace, socket, model, vocab, targets, io);
  bool mismatch = false;
  if (loadSeconds >= 0) {
    // What a user feels right after `load` returns: its time, then the first request's first token
    // (a compile on the serving path would show here, not in the warm rounds below).
    const RoundResult first = runRound(o, socket, model, 1, vocab, 7, io);
    const double ttft = first.ttftMs.empty() ? -1 : first.ttftMs[0];
    if (o.json) {
      std::printf("{\"load_s\": %.3f, \"first_request_ttft_ms\": %.2f}\n", loadSeconds, ttft);
    } else {
      std::printf("# load %.2f s; the first request after it: TTFT %.1f ms\n", loadSeconds, ttft);
    }
  }
  if (!o.json) {
    std::printf("# jitllm-serve-bench: model %s, %d prompt tokens, %d generated per client\n", model.c_str(),
                o.promptTokens, o.genTokens);
    std::printf(
        "| clients | aggregate tok/s | decode tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | busy "
        "|\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int n : o.clients) {
    std::vector<std::vector<int32_t>> alone;
    if (o.check) {
      // Each prompt answered with nothing else running: the reference.
      for (int i = 0; i < n; i++) {
        auto conn = client::DaemonConnection::connect(*io.lowLevelProvider, socket);
        auto req = conn->daemon().generateRequest();
        req.initRequest().setModel(model);
        const auto prompt = promptFor(i, o.promptTokens, vocab, 0);
        auto t = req.getRequest().initPrompt().initTokens(uint32_t(prompt.size()));
        for (size_t k = 0; k < prompt.size(); k++) t.set(uint32_t(k), prompt[k]);
        req.getRequest().setMaxTokens(uint32_t(o.genTokens));
        req.getRequest().setIgnoreEndOfGeneration(true);
        Reply unused;
        req.setSink(kj::heap<TimingSink>(unused));
        auto resp = req.send().wait(io.waitScope);
        std::vector<int32_t> ids;
        for (int32_t id : resp.getTokens()) ids.push_back(id);
        alone.push_back(std::move(ids));
      }
    }
    // Fresh prompts every round (an idle session holding one would skip its prefill), but the
    // checked round asks the prompts answered alone.
    uint32_t salt = o.check ? 0 : 1000u * uint32_t(n);
    if (o.warmup) runRound(o, socket, model, n, vocab, ++salt + 500, io);
    RoundResult best;
    for (int round = 0; round < o.rounds; round++) {
      RoundResult r = runRound(o, socket, model, n, vocab, o.check ? 0 : ++salt, io);
      if (round == 0 || r.aggregate > best.aggregate) best = std::move(r);
    }
    size_t failed = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
      if (!best.errors[size_t(i)].empty()) {
        failed++;
        std::fprintf(stderr, "client %d: %s\n", i, best.errors[size_t(i)].c_str());
      } else if (o.check && best.ids[size_t(i)] != alone[size_t(i)]) {
        wrong++;
        std::fprintf(stderr, "client %d: its %zu tokens differ from the same prompt's reply alone\n", i,
                     best.ids[size_t(i)].size());
      }
    }
    mismatch |= failed > 0 || wrong > 0;
    const double ttft50 = percentile(best.ttftMs, 50), ttft99 = percentile(best.ttftMs, 99);
    const double tpot50 = percentile(best.tpotMs, 50), tpot99 = percentile(best.tpotMs, 99);
    if (o.json) {
      std::printf(
          "{\"clients\": %d, \"prompt_tokens\": %d, \"generated_tokens\": %d, \"transport\": \"%s\", "
          "\"aggregate_tok_s\": %.1f, "
          "\"decode_tok_s\": %.1f, \"ttft_ms_p50\": %.2f, \"ttft_ms_p99\": %.2f, \"tpot_ms_p50\": %.3f, "
          "\"tpot_ms_p99\": %.3f, \"device_busy\": %s, \"failed\": %zu, \"mismatched\": %zu}\n",
          n, o.promptTokens, o.genTokens, o.http.empty() ? "rpc" : "http", best.aggregate, best.decode, ttft50, ttft99,
          tpot50, tpot99, best.busy < 0 ? "null" : std::to_string(best.busy).c_str(), failed, wrong);
    } else {
      std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %s |\n", n, best.aggregate, best.decode, ttft50,
                  ttft99, tpot50, tpot99, best.busy < 0 ? "-" : (std::to_string(int(best.busy * 100)) + "%").c_str());
    }
    if (o.check && !o.json) {
      std::printf("# check at %d clients: %zu failed, %zu differ from the reply alone\n", n, failed, wrong);
    }
  }
  return mismatch ? 1 : 0;
}

}  // namespace
}  // namespace jitllm::tools

int main(int argc, char** argv) {
  return jitllm::tools::runTool("jitllm-serve-bench", jitllm::tools::kUsage, jitllm::tools::run, argc, argv);
}
