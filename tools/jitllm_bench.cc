// jitllm-bench: prefill and decode speed of a model, the way llama-bench measures them.
//
// ppN: N prompt tokens in one forward pass into an empty session. tgN: N tokens decoded one at a
// time into an empty session. Each test runs once to warm up, then REPS times; the output ends
// with one line per test, "pp128 <tokens/s>" and "tg64 <tokens/s>" (mean over the repetitions),
// which scripts read.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "daemon/runtime/device_spec.h"
#include "daemon/runtime/model.h"
#include "kernels/error.h"
#include "tools/command_line.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-bench MODEL.gguf [-t THREADS] [-p N] [-n N] [-r REPS] [--device SPEC]
  -t THREADS   CPU threads per CPU device (default: all cores)
  -p N         prompt tokens for the prefill test (default 128; 0 skips it)
  -n N         tokens for the decode test (default 64; 0 skips it)
  -r REPS      repetitions after one warm-up (default 5)
  --device S   devices, e.g. cpu:0 (default), cpu:0,cpu:1, vulkan:0 or cpu:0,vulkan:0
)";

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

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
  std::string modelPath, deviceSpec = "cpu:0";
  int64_t nPrompt = 128, nGen = 64;
  int reps = 5;
  runtime::DeviceSpecOptions deviceOptions;
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "-t")
      deviceOptions.cpuThreads = cl.number<int>(a);
    else if (a == "-p")
      nPrompt = cl.number<int64_t>(a);
    else if (a == "-n")
      nGen = cl.number<int64_t>(a);
    else if (a == "-r")
      reps = cl.number<int>(a);
    else if (a == "--device")
      deviceSpec = cl.value(a);
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
  if (modelPath.empty()) throw tools::UsageError("no model given");
  if (nPrompt < 0 || nGen < 0 || reps < 1) throw tools::UsageError("-p and -n must be >= 0, -r >= 1");

  auto devices = runtime::createDevices(deviceSpec, deviceOptions);
  runtime::ModelLoadOptions options;
  for (auto& d : devices) options.devices.push_back(d.get());
  auto model = runtime::Model::load(modelPath, options);
  const auto& c = model->config();
  std::printf("model: %s (%s, %lld layers, embd %lld, vocab %lld), devices: %s, threads: %d\n", modelPath.c_str(),
              runtime::architectureName(c.arch), (long long)c.layers, (long long)c.embedding, (long long)c.vocabSize,
              deviceSpec.c_str(), devices.front()->info().threads);
  for (auto& d : devices) std::printf("device %s: %s\n", d->info().id.c_str(), d->info().name.c_str());

  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<std::string, Result>> results;
  std::vector<float> logits;
  if (nPrompt > 0) {
    const auto tokens = benchTokens(nPrompt, c.vocabSize);
    std::vector<double> rates;
    for (int r = 0; r <= reps; r++) {
      auto session = model->createSession(nPrompt);
      runtime::SequenceInput input{session.get(), tokens, false};
      logits.clear();
      const auto t0 = Clock::now();
      model->forward({&input, 1}, logits);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) rates.push_back(double(nPrompt) / s);  // r == 0 warms up
    }
    results.emplace_back("pp" + std::to_string(nPrompt), summarize(rates));
  }
  if (nGen > 0) {
    const auto tokens = benchTokens(nGen, c.vocabSize);
    std::vector<double> rates;
    for (int r = 0; r <= reps; r++) {
      auto session = model->createSession(nGen);
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < nGen; i++) {
        runtime::SequenceInput input{session.get(), {&tokens[size_t(i)], 1}, false};
        logits.clear();
        model->forward({&input, 1}, logits);
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) rates.push_back(double(nGen) / s);
    }
    results.emplace_back("tg" + std::to_string(nGen), summarize(rates));
  }
  for (const auto& [name, r] : results)
    std::printf("# %s: %.2f +- %.2f tok/s over %d runs\n", name.c_str(), r.mean, r.stddev, reps);
  for (const auto& [name, r] : results) std::printf("%s %.2f\n", name.c_str(), r.mean);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-bench", kUsage, run, argc, argv); }
