// A replayable serving workload for jitllm-serve-bench --trace: requests with their arrival time,
// service tier and lengths, one JSON object a line:
//   {"at_ms": 1234.5, "tier": "interactive", "prompt_tokens": 64, "max_tokens": 64}
// makeTrace() draws one: Poisson arrivals per tier at the given rates over a duration, batch jobs
// already waiting at the start, prompt and reply lengths uniform in [mean/2, 3 mean/2]; the same
// spec and seed always give the same trace. Traces used in docs/benchmarks.md are committed under
// tools/bench/traces/.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jitllm::tools {

struct TraceRequest {
  double atMs = 0;
  std::string tier;  // "interactive", "standard", "batch"
  int promptTokens = 1;
  int maxTokens = 1;
};

struct TraceSpec {
  double seconds = 30;
  double interactiveRate = 1;  // arrivals per second
  int interactivePrompt = 64, interactiveTokens = 64;
  int batchJobs = 16;    // waiting at the start
  double batchRate = 0;  // later arrivals per second
  int batchPrompt = 512, batchTokens = 256;
  uint64_t seed = 1;
};

std::vector<TraceRequest> makeTrace(const TraceSpec& spec);
std::string formatTrace(const std::vector<TraceRequest>& trace);
// UsageError-style std::runtime_error naming the line for a line that is not a request.
std::vector<TraceRequest> parseTrace(const std::string& text);

}  // namespace jitllm::tools
