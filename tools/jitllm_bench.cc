// jitllm-bench: prefill and decode speed of a model, the way llama-bench measures them.
//
// ppN: N prompt tokens in one forward pass into an empty session. tgN: N tokens decoded one at a
// time into an empty session. Each test runs once to warm up, then REPS times; the output ends
// with one line per test, "pp128 <tokens/s>" and "tg64 <tokens/s>" (mean over the repetitions),
// which scripts read.
//
// -b B1,B2,...: decode as a server does (the daemon's step): B sessions at once, one token each a
// step, and instead of logits each row's greedy candidate selected on the device. "tgN xB" is the
// aggregate rate (B x N tokens over the time), what jitllm-serve-bench measures through the daemon
// without the socket, and what llama-batched-bench's S_TG measures.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "base/error.h"
#include "engine/devices/builtin_backends.h"
#include "engine/runtime/model.h"
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

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
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
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "--tune")
      tune = true;
    else if (a == "-t")
      deviceOptions.cpuThreads = cl.number<int>(a);
    else if (a == "-p")
      nPrompt = cl.number<int64_t>(a);
    else if (a == "-n")
      nGen = cl.number<int64_t>(a);
    else if (a == "-r")
      reps = cl.number<int>(a);
    else if (a == "-d")
      depth = cl.number<int64_t>(a);
    else if (a == "--devices")
      deviceSpec = cl.value(a);
    else if (a == "--fit")
      fit = cl.oneOf(a, {"stream", "cpu"});
    else if (a == "--tp")
      tensorParallel = cl.number<int>(a);
    else if (a == "--partial-sums")
      partialSums = true;
    else if (a == "-b") {
      for (const int b : tools::parseCounts(a, cl.value(a), 1024)) batches.push_back(b);
    } else if (a == "--kv")
      kvPrecision = cl.oneOf(a, {"f32", "f16"}) == "f16" ? KvPrecision::kF16 : KvPrecision::kF32;
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-')
      throw tools::UsageError("unknown option " + a);
    else if (modelPath.empty())
      modelPath = a;
    else
      throw tools::UsageError("unexpected argument " + a);
  }
  if (tune) {
    tuneThisCpu();
    if (modelPath.empty()) return 0;
  }
  if (modelPath.empty()) throw tools::UsageError("no model given");
  if (nPrompt < 0 || nGen < 0 || depth < 0 || reps < 1) {
    throw tools::UsageError("-p, -n and -d must be >= 0, -r >= 1");
  }

  if (tensorParallel > 1 && !fit.empty()) throw tools::UsageError("--tp and --fit do not mix");
  auto devices = tools::openEachDevice(deviceSpec, deviceOptions);
  runtime::ModelLoadOptions options;
  options.kvPrecision = kvPrecision;
  options.tensorParallel = tensorParallel;
  options.partialSums = partialSums;
  for (auto& d : devices) options.devices.push_back(d.get());
  if (!fit.empty()) {
    options.placer = [&](const std::vector<size_t>& weights, size_t kvPerToken, int64_t, size_t) {
      return fitPlacement(weights, kvPerToken, depth + std::max(nPrompt, nGen) + 1, devices, fit == "stream",
                          options.streamed);
    };
  }
  auto model = runtime::Model::load(modelPath, options);
  if (!fit.empty()) {
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
    std::printf("fit %s: %d blocks resident on %s, %d streamed through it, %d on %s\n", fit.c_str(), resident,
                devices[0]->info().id.str().c_str(), streamedBlocks, elsewhere,
                devices.back()->info().id.str().c_str());
  }
  const auto& c = model->config();
  std::printf("model: %s (%s, %lld layers, embd %lld, vocab %lld), devices: %s, threads: %d, kv %s%s\n",
              modelPath.c_str(), runtime::architectureName(c.arch), (long long)c.layers, (long long)c.embedding,
              (long long)c.vocabSize, deviceSpec.c_str(), devices.front()->info().threads,
              kvPrecision == KvPrecision::kF16 ? "f16" : "f32",
              tensorParallel > 1 ? (", blocks split over " + std::to_string(tensorParallel) + " devices" +
                                    (partialSums ? " (partial sums)" : ""))
                                       .c_str()
                                 : "");
  for (auto& d : devices) std::printf("device %s: %s\n", d->info().id.str().c_str(), d->info().name.c_str());

  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<std::string, Result>> results;
  std::vector<float> logits;
  const std::string at = depth > 0 ? " @ d" + std::to_string(depth) : "";
  // Prompts are fed as the step loop feeds them: from kPromptPathMinTokens on, on a device's prompt
  // path (SequenceInput::promptTokens; JITLLM_CUDA_PROMPT_GEMM=0 keeps CUDA's on decode's kernels).
  const auto promptTokens = [](std::span<const int32_t> tokens) {
    return int64_t(tokens.size()) >= runtime::kPromptPathMinTokens ? int64_t(tokens.size()) : int64_t(0);
  };
  // A session with `depth` tokens already in its context (prefilled untimed), room for `more`.
  const auto context = [&](int64_t more) {
    auto session = model->createSession(depth + more);
    if (depth > 0) {
      const auto tokens = benchTokens(depth, c.vocabSize);
      runtime::SequenceInput input{session.get(), tokens, false, promptTokens(tokens)};
      logits.clear();
      model->forward({&input, 1}, logits);
    }
    return session;
  };
  if (nPrompt > 0) {
    const auto tokens = benchTokens(nPrompt, c.vocabSize);
    std::vector<double> rates;
    for (int r = 0; r <= reps; r++) {
      auto session = context(nPrompt);
      runtime::SequenceInput input{session.get(), tokens, false, promptTokens(tokens)};
      logits.clear();
      const auto t0 = Clock::now();
      model->forward({&input, 1}, logits);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) rates.push_back(double(nPrompt) / s);  // r == 0 warms up
    }
    results.emplace_back("pp" + std::to_string(nPrompt) + at, summarize(rates));
  }
  if (nGen > 0 && batches.empty()) {
    const auto tokens = benchTokens(nGen, c.vocabSize);
    std::vector<double> rates;
    for (int r = 0; r <= reps; r++) {
      auto session = context(nGen);
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < nGen; i++) {
        runtime::SequenceInput input{session.get(), {&tokens[size_t(i)], 1}, false};
        logits.clear();
        model->forward({&input, 1}, logits);
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) rates.push_back(double(nGen) / s);
    }
    results.emplace_back("tg" + std::to_string(nGen) + at, summarize(rates));
  }
  if (nGen > 0) {
    for (const int64_t batch : batches) {
      const auto tokens = benchTokens(nGen + batch, c.vocabSize);
      const std::vector<CandidateRequest> greedy(size_t(batch), CandidateRequest{1, 1.0f, {}});
      std::vector<int32_t> ids;
      std::vector<float> values;
      std::vector<double> rates;
      for (int r = 0; r <= reps; r++) {
        std::vector<std::unique_ptr<runtime::Session>> sessions;
        for (int64_t b = 0; b < batch; b++) sessions.push_back(context(nGen));
        std::vector<runtime::SequenceInput> inputs(static_cast<size_t>(batch));
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < nGen; i++) {
          // Session b decodes token i + b: the rows of a step differ, as a server's do.
          for (int64_t b = 0; b < batch; b++)
            inputs[size_t(b)] = {sessions[size_t(b)].get(), {&tokens[size_t(i + b)], 1}, false};
          model->forward(inputs, greedy, 1, ids, values);
        }
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (r > 0) rates.push_back(double(nGen * batch) / s);
      }
      results.emplace_back("tg" + std::to_string(nGen) + at + " x" + std::to_string(batch), summarize(rates));
    }
  }
  for (const auto& [name, r] : results)
    std::printf("# %s: %.2f +- %.2f tok/s over %d runs\n", name.c_str(), r.mean, r.stddev, reps);
  std::printf("# %s memory in use: %.0f MiB of %.0f MiB\n", devices[0]->info().id.str().c_str(),
              double(devices[0]->memoryUsed()) / (1 << 20), double(devices[0]->info().memoryBudget) / (1 << 20));
  for (const auto& [name, r] : results) std::printf("%s %.2f\n", name.c_str(), r.mean);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-bench", kUsage, run, argc, argv); }
