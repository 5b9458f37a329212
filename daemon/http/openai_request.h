// The body of POST /v1/chat/completions and /v1/completions, read from JSON into what a
// generation needs, every field checked for its type and range against OpenAI's API reference:
// a wrong one is HttpError 400 naming the parameter (`param`), so a client sees what it got wrong.
// Fields the reference has and jitllm cannot honour (n > 1, tools, response_format ...) are
// refused the same way rather than ignored; unknown fields are ignored, as OpenAI does.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/server/service_tier.h"
#include "engine/chat/chat_template.h"
#include "engine/runtime/sampler.h"

namespace jitllm::server::http {

enum class Endpoint { kChat, kCompletions };

struct CompletionParams {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  std::vector<runtime::ChatMessage> messages;  // chat
  std::string prompt;                          // completions, as text ...
  std::vector<int32_t> promptTokens;           // ... or as token ids
  std::optional<uint32_t> maxTokens;           // unset: chat until the context is full, completions 16
  runtime::SamplingParams sampling;
  std::vector<std::string> stops;
  bool stream = false;
  bool includeUsage = false;               // stream_options.include_usage
  bool echo = false;                       // completions: the prompt before the reply
  int32_t topLogprobs = -1;                // -1: no logprobs; else logprobs with this many alternatives
  std::optional<double> keepAliveSeconds;  // Ollama's per-request keep_alive
  bool ignoreEos = false;                  // llama.cpp's and vLLM's ignore_eos: benchmarks
  std::string user;
  std::optional<ServiceTier> serviceTier;  // OpenAI's service_tier (service_tier.h); unset: the caller's default
};

// Limits on what one request may ask for, so that a client cannot make the daemon allocate
// without bound (the body's size is limited before it is parsed).
inline constexpr size_t kMaxStopStrings = 4;  // OpenAI's own limit
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr uint32_t kMaxTokensPerRequest = 1 << 20;
inline constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's limit for chat

// Error HttpError(400) for malformed JSON or a bad field.
CompletionParams parseCompletionRequest(Endpoint endpoint, const std::string& body);

}  // namespace jitllm::server::http
