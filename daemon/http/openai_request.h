// The body of POST /v1/chat/completions and /v1/completions translated into the daemon's
// GenerationRequest: every field checked for its type and for the ranges OpenAI's API reference
// gives it; a wrong one is HttpError 400 naming the parameter (`param`), so a client sees what it
// got wrong. What jitllmd requires of any request is checked after, once, by the intake
// (validateRequest), and its RequestError told in OpenAI's names here (openAiErrorFor). Fields the
// reference has and jitllm cannot honour (n > 1, tools, response_format ...) are refused rather
// than ignored; unknown fields are ignored, as OpenAI does.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/http/http_error.h"
#include "daemon/server/generation_request.h"

namespace jitllm::server::http {

enum class Endpoint { kChat, kCompletions };

// A completion request: the daemon's GenerationRequest, and how the answer is to be shaped.
struct CompletionParams {
  Endpoint endpoint = Endpoint::kChat;
  GenerationRequest request;  // model, prompt, sampling, stops, tier, ... (not yet validated)
  bool stream = false;
  bool includeUsage = false;               // stream_options.include_usage
  bool echo = false;                       // completions: the prompt before the reply
  std::optional<double> keepAliveSeconds;  // Ollama's per-request keep_alive
  std::string user;
};

// OpenAI's own limits, stricter than jitllmd's (generation_request.h).
inline constexpr size_t kOpenAiMaxStopStrings = 4;
// The legacy completions endpoint's default reply length, as OpenAI documents it; chat's default
// is "until the context is full".
inline constexpr uint32_t kCompletionsDefaultMaxTokens = 16;

// Error HttpError(400) for malformed JSON or a field of the wrong type, or out of OpenAI's range.
CompletionParams parseCompletionRequest(Endpoint endpoint, const std::string& body);
// A RequestError (validateRequest, the tier) as OpenAI's clients expect it: 400 naming the
// parameter by OpenAI's name, 403 permission_error for what the caller may not ask.
HttpError openAiErrorFor(const RequestError& e, Endpoint endpoint);

}  // namespace jitllm::server::http
