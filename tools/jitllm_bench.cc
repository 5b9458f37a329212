// jitllm-bench: prefill and decode speed of a model, the way llama-bench measures them, through
// the step loop the daemon runs (engine/runtime/step_loop.h) - its prefill chunks
// (StepLoop::Options::prefillChunk), its prompt-path rule (a prompt of kPromptPathMinTokens or more
// on the devices' prompt path, all but its last token) and its device-side greedy pick - so the
// figures are the daemon's, less its socket.
//
// ppN: N prompt tokens fed into an empty session until its first token is picked. tgN: N tokens
// decoded one a step into an empty session, each the greedy pick of the last. Each test runs once
// to warm up, then REPS times; the output ends with one line per test, "pp128 <tokens/s>" and
// "tg64 <tokens/s>" (mean over the repetitions), which scripts read.
//
// -b B1,B2,...: decode as a server does: B sequences at once, one token each a step. "tgN xB" is
// the aggregate rate (B x N tokens over the time), what jitllm-serve-bench measures through the
// daemon without the socket, and what llama-batched-bench's S_TG measures.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "base/error.h"
#include "engine/devices/builtin_backends.h"
#include "engine/runtime/model.h"
#include "engine/runtime/step_loop.h"
#include "kernels/cpu/cpu_topology.h"
#include "kernels/cpu/cpu_tuner.h"
#include "kernels/cpu/cpu_tuning.h"
#include "kernels/device.h"
#include "tools/command_line.h"
#include "tools/device_list.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-bench MODEL.gguf [-t THREADS] [-p N] [-n N] [-r REPS] [-d N]
                    [--devices SPEC] [--kv f32|f16] [--fit MODE] [--tp K [--partial-sums]] [-b B,...]
       jitllm-bench --tune [MODEL.gguf ...]
  --tune       measure this CPU's kernel settings (threads with and without SMT siblings, the
               decode streaming threshold, the prefill chunk, and on AVX-512 VNNI which products
               run faster on the 256-bit integer kernels), keep them with the kernel cache
               (where every CPU device then finds them), print them; then benchmark MODEL if given
  -t THREADS   CPU threads per CPU device (default: the tuned count, else every physical core)
  -p N         prompt tokens for the prefill test (default 128; 0 skips it)
  -n N         tokens for the decode test (default 64; 0 skips it)
  -r REPS      repetitions after one warm-up (default 5)
  -d N         context already in the session before each test, untimed (default 0), as
               llama-bench's -d: decode speed at depth N (attention over N + i positions)
  --devices S  devices, e.g. cpu:0 (default), cpu:0,cpu:1, vulkan:0 or cpu:0,vulkan:0
  --kv f32|f16 KV cache precision (default f32, as jitllm-run; llama.cpp's default is f16)
  --fit MODE   a model larger than the first device (e.g. --devices cuda:0@2G,cpu:0): the blocks
               that do not fit are `stream`ed through its memory each step, or run on the `cpu`
               (the last device); the head stays on the first device, the embedding goes to
               the CPU when there is one. Default: blocks spread evenly over the devices.
  --tp K       split every block over the first K devices (tensor parallelism, docs/tiers.md);
               a GPU named twice in --devices is two devices of it
  --partial-sums  with --tp: split the output and down projections too
  -b B,...     decode N tokens in B sessions at once instead, greedy candidates picked on the
               device (the serving step): "tgN xB", aggregate tok/s, for each B listed
)";

// Placement for --fit: the head and as many blocks as fit stay on devices[0]; the rest stream
// through it or go to the last device. Leaves room for the KV of `contextTokens`, activations and,
// when streaming, two slots of the largest block.
std::vector<int> fitPlacement(const std::vector<size_t>& weights, size_t kvPerToken, int64_t contextTokens,
                              const std::vector<std::unique_ptr<Device>>& devices, bool stream,
                              std::vector<bool>& streamed) {
  const size_t units = weights.size();
  const int last = int(devices.size()) - 1;
  const bool hasCpu = devices.back()->info().caps.hostMemory && last > 0;
  if (!stream && !hasCpu) throw tools::UsageError("--fit cpu needs a CPU device last in --devices");
  size_t largest = 0;
  for (size_t u = 1; u + 1 < units; u++) largest = std::max(largest, weights[u]);
  const size_t kvPerBlock = kvPerToken * size_t(contextTokens);
  const size_t budget = devices[0]->info().memoryBudget;
  // Activations, the head, the slots, and KV for every block on the first device.
  size_t used = (size_t(256) << 20) + weights.back() + (stream ? 2 * largest + kvPerBlock * (units - 2) : 0);
  std::vector<int> placement(units, 0);
  streamed.assign(units, false);
  if (hasCpu) {
    placement[0] = last;
  } else {
    used += weights[0];
  }
  for (size_t u = 1; u + 1 < units; u++) {
    const size_t need = weights[u] + (stream ? 0 : kvPerBlock);
    if (used + need <= budget) {
      used += need;
    } else if (stream) {
      streamed[u] = true;
    } else {
      placement[u] = last;
    }
  }
  if (used > budget) throw Error(ErrorKind::kOverloaded, "the head, activations and KV alone exceed the first device");
  return placement;
}

struct Result {
  double mean = 0, stddev = 0;
};

Result summarize(const std::vector<double>& tokensPerSecond) {
  Result r;
  for (double v : tokensPerSecond) r.mean += v;
  r.mean /= double(tokensPerSecond.size());
  for (double v : tokensPerSecond) r.stddev += (v - r.mean) * (v - r.mean);
  r.stddev = tokensPerSecond.size() > 1 ? std::sqrt(r.stddev / double(tokensPerSecond.size() - 1)) : 0;
  return r;
}

// Deterministic token ids spread over the vocabulary (the values do not change the speed).
std::vector<int32_t> benchTokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = 12345;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t((x >> 33) % uint64_t(vocab));
  }
  return ids;
}

// --tune: measures, stores and prints this CPU's tuning (kernels/cpu/cpu_tuner.h).
void tuneThisCpu() {
  const cpu::CpuTopology topology = cpu::detectCpuTopology();
  const cpu::Isa isa = cpu::bestIsa();
  std::printf("tuning %s (%d cores, %d logical CPUs, L2 %zu KiB, L3 %zu KiB) on %s\n", topology.model.c_str(),
              topology.physicalCores, topology.logicalCpus, topology.l2Bytes >> 10, topology.l3Bytes >> 10,
              cpu::isaName(isa));
  const cpu::CpuTuning tuning =
      cpu::measureCpuTuning(topology, isa, [](const std::string& line) { std::printf("  %s\n", line.c_str()); });
  std::printf("tuned: threads %d, cache_resident_bytes %zu, prefill_chunk %lld, prefetch_bytes %zu, narrow_int8 %u\n",
              tuning.threads, tuning.cacheResidentBytes, static_cast<long long>(tuning.prefillChunk),
              tuning.prefetchBytes, tuning.narrowInt8);
  const std::string root = cacheRoot();
  if (cpu::storeCpuTuning(root, topology, tuning)) {
    std::printf("kept in %s\n", cpu::cpuTuningPath(root, topology).c_str());
  } else {
    std::printf("not kept: no writable cache directory (JITLLM_CACHE_DIR, XDG_CACHE_HOME or HOME)\n");
  }
  std::fflush(stdout);
}

struct BenchOptions {
  std::string modelPath, deviceSpec = "cpu:0";
  int64_t nPrompt = 128, nGen = 64, depth = 0;
  int reps = 5;
  std::string fit;
  int tensorParallel = 1;
  bool partialSums = false;
  std::vector<int64_t> batches;
  KvPrecision kvPrecision = KvPrecision::kF32;
  runtime::DeviceSpecOptions deviceOptions;
  bool tune = false;
};

// The options; false when only the usage was asked for.
bool parse(int argc, char** argv, BenchOptions& o) {
  tools::CommandLine cl(argc, argv);
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "--tune")
      o.tune = true;
    else if (a == "-t")
      o.deviceOptions.cpuThreads = cl.number<int>(a);
    else if (a == "-p")
      o.nPrompt = cl.number<int64_t>(a);
    else if (a == "-n")
      o.nGen = cl.number<int64_t>(a);
    else if (a == "-r")
      o.reps = cl.number<int>(a);
    else if (a == "-d")
      o.depth = cl.number<int64_t>(a);
    else if (a == "--devices")
      o.deviceSpec = cl.value(a);
    else if (a == "--fit")
      o.fit = cl.oneOf(a, {"stream", "cpu"});
    else if (a == "--tp")
      o.tensorParallel = cl.number<int>(a);
    else if (a == "--partial-sums")
      o.partialSums = true;
    else if (a == "-b") {
      for (const int b : tools::parseCounts(a, cl.value(a), 1024)) o.batches.push_back(b);
    } else if (a == "--kv")
      o.kvPrecision = cl.oneOf(a, {"f32", "f16"}) == "f16" ? KvPrecision::kF16 : KvPrecision::kF32;
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return false;
    } else if (!a.empty() && a[0] == '-')
      throw tools::UsageError("unknown option " + a);
    else if (o.modelPath.empty())
      o.modelPath = a;
    else
      throw tools::UsageError("unexpected argument " + a);
  }
  return true;
}

std::unique_ptr<runtime::Model> loadModel(const BenchOptions& o, const std::vector<std::unique_ptr<Device>>& devices) {
  runtime::ModelLoadOptions options;
  options.kvPrecision = o.kvPrecision;
  options.tensorParallel = o.tensorParallel;
  options.partialSums = o.partialSums;
  for (auto& d : devices) options.devices.push_back(d.get());
  if (!o.fit.empty()) {
    options.placer = [&](const std::vector<size_t>& weights, size_t kvPerToken, int64_t, size_t) {
      return fitPlacement(weights, kvPerToken, o.depth + std::max(o.nPrompt, o.nGen) + 1, devices, o.fit == "stream",
                          options.streamed);
    };
  }
  auto model = runtime::Model::load(o.modelPath, options);
  if (!o.fit.empty()) {
    int streamedBlocks = 0, resident = 0, elsewhere = 0;
    for (int u = 1; u + 1 < model->unitCount(); u++) {
      const auto info = model->unitInfo(u);
      if (info.streamed) {
        streamedBlocks++;
      } else if (info.device == devices[0].get()) {
        resident++;
      } else {
        elsewhere++;
      }
    }
    std::printf("fit %s: %d blocks resident on %s, %d streamed through it, %d on %s\n", o.fit.c_str(), resident,
                devices[0]->info().id.str().c_str(), streamedBlocks, elsewhere,
                devices.back()->info().id.str().c_str());
  }
  return model;
}

// Runs the tests through the step loop the daemon's model workers run: each sequence in its own
// session, greedy, generating exactly its maxTokens (no end-of-generation stop), its prompt fed in
// the daemon's chunks.
class StepLoopBench final {
 public:
  StepLoopBench(runtime::Model& model, const BenchOptions& o) : model_(model), o_(o) {
    depthTokens_ = benchTokens(o.depth, model.config().vocabSize);
  }

  // Sessions with `depth` tokens already in their context (prefilled untimed, through a step
  // loop too), room for `more`.
  std::vector<std::unique_ptr<runtime::Session>> contexts(int64_t count, int64_t more) {
    std::vector<std::unique_ptr<runtime::Session>> sessions;
    for (int64_t i = 0; i < count; i++) sessions.push_back(model_.createSession(o_.depth + more + 1));
    if (o_.depth > 0) {
      const std::vector<std::vector<int32_t>> none(static_cast<size_t>(count));
      run(sessions, none, 1, 0);
    }
    return sessions;
  }

  // One sequence per session, fed `extra[i]` after the depth tokens, generating `maxTokens`, all in
  // one step loop until every one has ended; the seconds that took.
  double run(const std::vector<std::unique_ptr<runtime::Session>>& sessions,
             const std::vector<std::vector<int32_t>>& extra, int32_t maxTokens, int64_t fed) {
    runtime::StepLoop::Options options;
    runtime::StepLoop loop(model_, options);
    std::vector<runtime::Sequence*> sequences;
    for (size_t i = 0; i < sessions.size(); i++) {
      runtime::SequenceRequest request;
      request.prompt = depthTokens_;
      request.prompt.insert(request.prompt.end(), extra[i].begin(), extra[i].end());
      request.maxTokens = maxTokens;
      request.stopAtEndOfGeneration = false;
      sequences.push_back(&loop.add(*sessions[i], std::move(request), nullptr, size_t(fed)));
    }
    const auto start = Clock::now();
    while (loop.step()) {
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (const runtime::Sequence* s : sequences) {
      if (s->error()) throw *s->error();
      if (s->generated() != maxTokens) throw Error(ErrorKind::kFailed, "a benchmark sequence ended early");
    }
    return seconds;
  }

  Result prompt() {
    const auto tokens = benchTokens(o_.nPrompt, model_.config().vocabSize);
    std::vector<double> rates;
    for (int r = 0; r <= o_.reps; r++) {
      const auto sessions = contexts(1, o_.nPrompt);
      const double s = run(sessions, {tokens}, 1, o_.depth);
      if (r > 0) rates.push_back(double(o_.nPrompt) / s);  // r == 0 warms up
    }
    return summarize(rates);
  }

  // `batch` sequences decoding nGen tokens each; 0: one, as plain tgN.
  Result decode(int64_t batch) {
    const int64_t n = std::max<int64_t>(batch, 1);
    // Sequence b starts from token b: the rows of a step differ, as a server's do.
    const auto tokens = benchTokens(n, model_.config().vocabSize);
    std::vector<std::vector<int32_t>> first;
    for (int32_t t : tokens) first.push_back({t});
    std::vector<double> rates;
    for (int r = 0; r <= o_.reps; r++) {
      const auto sessions = contexts(n, o_.nGen);
      const double s = run(sessions, first, int32_t(o_.nGen), o_.depth);
      if (r > 0) rates.push_back(double(o_.nGen * n) / s);
    }
    return summarize(rates);
  }

 private:
  using Clock = std::chrono::steady_clock;
  runtime::Model& model_;
  const BenchOptions& o_;
  std::vector<int32_t> depthTokens_;
};

int run(int argc, char** argv) {
  BenchOptions o;
  if (!parse(argc, argv, o)) return 0;
  if (o.tune) {
    tuneThisCpu();
    if (o.modelPath.empty()) return 0;
  }
  if (o.modelPath.empty()) throw tools::UsageError("no model given");
  if (o.nPrompt < 0 || o.nGen < 0 || o.depth < 0 || o.reps < 1) {
    throw tools::UsageError("-p, -n and -d must be >= 0, -r >= 1");
  }
  if (o.nGen > INT32_MAX) throw tools::UsageError("-n is at most " + std::to_string(INT32_MAX));
  if (o.tensorParallel > 1 && !o.fit.empty()) throw tools::UsageError("--tp and --fit do not mix");
  auto devices = tools::openEachDevice(o.deviceSpec, o.deviceOptions);
  auto model = loadModel(o, devices);
  const auto& c = model->config();
  std::printf("model: %s (%s, %lld layers, embd %lld, vocab %lld), devices: %s, threads: %d, kv %s%s\n",
              o.modelPath.c_str(), runtime::architectureName(c.arch), (long long)c.layers, (long long)c.embedding,
              (long long)c.vocabSize, o.deviceSpec.c_str(), devices.front()->info().threads,
              o.kvPrecision == KvPrecision::kF16 ? "f16" : "f32",
              o.tensorParallel > 1 ? (", blocks split over " + std::to_string(o.tensorParallel) + " devices" +
                                      (o.partialSums ? " (partial sums)" : ""))
                                         .c_str()
                                   : "");
  for (auto& d : devices) std::printf("device %s: %s\n", d->info().id.str().c_str(), d->info().name.c_str());

  StepLoopBench bench(*model, o);
  std::vector<std::pair<std::string, Result>> results;
  const std::string at = o.depth > 0 ? " @ d" + std::to_string(o.depth) : "";
  if (o.nPrompt > 0) results.emplace_back("pp" + std::to_string(o.nPrompt) + at, bench.prompt());
  if (o.nGen > 0 && o.batches.empty()) results.emplace_back("tg" + std::to_string(o.nGen) + at, bench.decode(0));
  if (o.nGen > 0) {
    for (const int64_t batch : o.batches) {
      results.emplace_back("tg" + std::to_string(o.nGen) + at + " x" + std::to_string(batch), bench.decode(batch));
    }
  }
  for (const auto& [name, r] : results)
    std::printf("# %s: %.2f +- %.2f tok/s over %d runs\n", name.c_str(), r.mean, r.stddev, o.reps);
  std::printf("# %s memory in use: %.0f MiB of %.0f MiB\n", devices[0]->info().id.str().c_str(),
              double(devices[0]->memoryUsed()) / (1 << 20), double(devices[0]->info().memoryBudget) / (1 << 20));
  for (const auto& [name, r] : results) std::printf("%s %.2f\n", name.c_str(), r.mean);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-bench", kUsage, run, argc, argv); }
