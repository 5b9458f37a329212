// The decode loop for one session: feed a prompt, then sample and feed one token at a time
// until a limit, an end-of-generation token, or the caller says stop.
//
// This is the loop jitllm-run drives and the one the daemon's sessions will run; batching many
// sessions together is Model::forward's job, this drives one.
//
// Thread-safety: runs on the calling thread; the model and session must not be used elsewhere
// meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/runtime/model.h"
#include "engine/runtime/sampler.h"

namespace jitllm::runtime {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // fed after whatever the session already holds
  int32_t maxTokens = 32;
  SamplingParams sampling;
  bool stopAtEndOfGeneration = true;  // the tokenizer's EOS/EOT tokens end the reply (and are kept)
};

struct GenerationStats {
  int64_t promptTokens = 0;
  int64_t generatedTokens = 0;
  double promptSeconds = 0;    // until the first token's logits
  double generateSeconds = 0;  // the rest
};

// Called for each generated token with the logits it was drawn from; return false to stop.
using TokenCallback = std::function<bool(int32_t token, std::span<const float> logits)>;

GenerationStats generate(Model& model, Session& session, const GenerationRequest& request,
                         const TokenCallback& onToken);

}  // namespace jitllm::runtime
