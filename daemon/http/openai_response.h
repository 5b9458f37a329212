// The JSON of OpenAI's replies for a generation: a chat completion or text completion object,
// the chunks of a stream (chat.completion.chunk / text_completion), usage and logprobs, in the
// shapes of OpenAI's API reference.
//
// Thread-safety: a ReplyShape is a value; its methods are pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/http/openai_request.h"
#include "daemon/server/generation_job.h"
#include "engine/tokenizer/tokenizer.h"

namespace jitllm::server::http {

// What stays the same in every object of one reply.
struct ReplyShape {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::string model;
  int64_t created = 0;                              // Unix seconds
  const tokenizer::Tokenizer* tokenizer = nullptr;  // for the logprobs' token text
  bool withLogprobs = false;
  std::string serviceTier = "default";  // OpenAI's name of the tier it ran in ("priority", "default", "flex")

  // A new reply's shape: a fresh random id, the time now.
  static ReplyShape start(Endpoint endpoint, std::string model, const tokenizer::Tokenizer& tokenizer, bool logprobs,
                          std::string serviceTier = "default");

  // textChunk's template: the chunk's JSON before and after its text.
  std::string textChunkPrefix, textChunkSuffix;

  // The complete (not streamed) reply.
  nlohmann::json complete(const std::string& text, const std::vector<TokenLogprob>& logprobs,
                          const GenerationStats& stats) const;
  // One chunk of a stream: new text (and its tokens' logprobs); `role` on a chat stream's first.
  nlohmann::json chunk(const std::string& text, const std::vector<TokenLogprob>& logprobs, bool role) const;
  // The same as JSON text, for a chunk of text alone - the one a stream sends per token. Built from
  // a template made once per reply: only the text is escaped per token, which keeps the HTTP
  // stream's cost per token near Cap'n Proto's (docs/benchmarks.md).
  std::string textChunk(const std::string& text) const;
  // The chunk that ends the stream's choice, with its finish_reason.
  nlohmann::json finalChunk(const GenerationStats& stats) const;
  // stream_options.include_usage: the chunk after the last, with no choices and the usage.
  nlohmann::json usageChunk(const GenerationStats& stats) const;

  static const char* finishReason(runtime::StopReason reason);
  static nlohmann::json usage(const GenerationStats& stats);

 private:
  nlohmann::json logprobsJson(const std::vector<TokenLogprob>& logprobs, size_t textOffset) const;
  nlohmann::json envelope(const char* object) const;
};

// JSON text as it goes on the wire: invalid UTF-8 (a token that is part of a character) replaced.
std::string dumpJson(const nlohmann::json& j);

}  // namespace jitllm::server::http
