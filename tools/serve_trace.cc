#include "tools/serve_trace.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>

namespace jitllm::tools {

namespace {

int uniformAround(std::mt19937_64& rng, int mean) {
  std::uniform_int_distribution<int> d(std::max(1, mean / 2), std::max(1, mean + mean / 2));
  return d(rng);
}

// Poisson arrivals at `rate` per second over [0, seconds).
void arrivals(std::mt19937_64& rng, double rate, double seconds, const std::string& tier, int prompt, int tokens,
              std::vector<TraceRequest>& out) {
  if (rate <= 0) return;
  std::exponential_distribution<double> gap(rate);
  for (double t = gap(rng); t < seconds; t += gap(rng)) {
    out.push_back({t * 1000.0, tier, uniformAround(rng, prompt), uniformAround(rng, tokens)});
  }
}

}  // namespace

std::vector<TraceRequest> makeTrace(const TraceSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  std::vector<TraceRequest> out;
  for (int i = 0; i < spec.batchJobs; i++) {
    out.push_back({0.0, "batch", uniformAround(rng, spec.batchPrompt), uniformAround(rng, spec.batchTokens)});
  }
  arrivals(rng, spec.interactiveRate, spec.seconds, "interactive", spec.interactivePrompt, spec.interactiveTokens, out);
  arrivals(rng, spec.batchRate, spec.seconds, "batch", spec.batchPrompt, spec.batchTokens, out);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.atMs < b.atMs; });
  return out;
}

std::string formatTrace(const std::vector<TraceRequest>& trace) {
  std::string out;
  for (const auto& r : trace) {
    const nlohmann::json line = {{"at_ms", std::round(r.atMs * 10) / 10},
                                 {"tier", r.tier},
                                 {"prompt_tokens", r.promptTokens},
                                 {"max_tokens", r.maxTokens}};
    out += line.dump() + "\n";
  }
  return out;
}

std::vector<TraceRequest> parseTrace(const std::string& text) {
  std::vector<TraceRequest> out;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    number++;
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return std::runtime_error("trace line " + std::to_string(number) + ": " + why);
    };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw bad(std::string("not JSON: ") + e.what());
    }
    TraceRequest r;
    try {
      r.atMs = j.at("at_ms").get<double>();
      r.tier = j.at("tier").get<std::string>();
      r.promptTokens = j.at("prompt_tokens").get<int>();
      r.maxTokens = j.at("max_tokens").get<int>();
    } catch (const nlohmann::json::exception& e) {
      throw bad(std::string("needs at_ms, tier, prompt_tokens and max_tokens: ") + e.what());
    }
    if (!(r.atMs >= 0) || r.promptTokens < 1 || r.maxTokens < 1) throw bad("times and lengths must be positive");
    if (r.tier != "interactive" && r.tier != "standard" && r.tier != "batch")
      throw bad("unknown tier '" + r.tier + "'");
    out.push_back(r);
  }
  return out;
}

}  // namespace jitllm::tools
