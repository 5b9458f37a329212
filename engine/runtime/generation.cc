#include "engine/runtime/generation.h"

#include <chrono>

#include "base/error.h"

namespace jitllm::runtime {

GenerationStats generate(Model& model, Session& session, const GenerationRequest& request,
                         const TokenCallback& onToken) {
  JITLLM_REQUIRE(!request.prompt.empty(), "generate: the prompt is empty");
  JITLLM_REQUIRE(request.maxTokens >= 0, "generate: max tokens must be >= 0");
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  Sampler sampler(request.sampling);
  const bool stopAtEnd = request.stopAtEndOfGeneration && model.hasTokenizer();
  GenerationStats stats;
  stats.promptTokens = int64_t(request.prompt.size());
  std::vector<int32_t> history = request.prompt;
  std::vector<float> logits;

  const auto t0 = Clock::now();
  SequenceInput input{&session, request.prompt, false};
  model.forward({&input, 1}, logits);
  const auto t1 = Clock::now();
  stats.promptSeconds = seconds(t1 - t0);

  for (int32_t i = 0; i < request.maxTokens; i++) {
    const int32_t token = sampler.sample(logits, history);
    stats.generatedTokens++;
    history.push_back(token);
    if (!onToken(token, logits)) break;
    if (stopAtEnd && model.tokenizer().isEndOfGeneration(token)) break;
    if (i + 1 == request.maxTokens) break;
    logits.clear();
    input.tokens = {&history.back(), 1};
    model.forward({&input, 1}, logits);
  }
  stats.generateSeconds = seconds(Clock::now() - t1);
  return stats;
}

}  // namespace jitllm::runtime
