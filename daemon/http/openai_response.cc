#include "daemon/http/openai_response.h"

#include <chrono>
#include <random>

namespace jitllm::server::http {
namespace {

using nlohmann::json;

std::string randomHex(size_t chars) {
  // One generator per thread (the KJ thread): ids only need to be unique, not secret.
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  while (out.size() < chars) {
    uint64_t bits = generator();
    for (int i = 0; i < 16 && out.size() < chars; i++, bits >>= 4) out += kDigits[bits & 15];
  }
  return out;
}

json bytesOf(std::string_view piece) {
  json out = json::array();
  for (char c : piece) out.push_back(int(uint8_t(c)));
  return out;
}

}  // namespace

std::string dumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ReplyShape ReplyShape::start(Endpoint endpoint, std::string model, const tokenizer::Tokenizer& tokenizer, bool logprobs,
                             std::string serviceTier) {
  ReplyShape s;
  s.serviceTier = std::move(serviceTier);
  s.endpoint = endpoint;
  s.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + randomHex(24);
  s.model = std::move(model);
  s.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  s.tokenizer = &tokenizer;
  s.withLogprobs = logprobs;
  // A text no reply can hold marks where each chunk's text goes.
  constexpr const char* kMarker = "\x01jitllm-text\x01";
  const std::string whole = dumpJson(s.chunk(kMarker, {}, false));
  const std::string marker = dumpJson(kMarker);
  const size_t at = whole.find(marker);
  s.textChunkPrefix = whole.substr(0, at);
  s.textChunkSuffix = whole.substr(at + marker.size());
  return s;
}

const char* ReplyShape::finishReason(runtime::StopReason reason) {
  switch (reason) {
    case runtime::StopReason::kEndOfGeneration:
    case runtime::StopReason::kStopString:
      return "stop";
    case runtime::StopReason::kMaxTokens:
    case runtime::StopReason::kContextFull:
      return "length";
  }
  return "stop";
}

json ReplyShape::usage(const GenerationStats& stats) {
  return {{"prompt_tokens", stats.promptTokens},
          {"completion_tokens", stats.generatedTokens},
          {"total_tokens", stats.promptTokens + stats.generatedTokens}};
}

json ReplyShape::envelope(const char* object) const {
  return {{"id", id},
          {"object", object},
          {"created", created},
          {"model", model},
          {"service_tier", serviceTier},
          {"system_fingerprint", "jitllm-" JITLLM_VERSION_STRING}};
}

json ReplyShape::logprobsJson(const std::vector<TokenLogprob>& logprobs, size_t textOffset) const {
  if (!withLogprobs) return nullptr;
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
      const std::string_view piece = tokenizer->tokenPiece(t.id, false);
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string_view p = tokenizer->tokenPiece(id, false);
        top.push_back({{"token", std::string(p)}, {"logprob", lp}, {"bytes", bytesOf(p)}});
      }
      content.push_back(
          {{"token", std::string(piece)}, {"logprob", t.logprob}, {"bytes", bytesOf(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  // The legacy completions shape: parallel arrays.
  json tokens = json::array(), tokenLogprobs = json::array(), top = json::array(), offsets = json::array();
  size_t offset = textOffset;
  for (const TokenLogprob& t : logprobs) {
    const std::string piece(tokenizer->tokenPiece(t.id, false));
    tokens.push_back(piece);
    tokenLogprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [id, lp] : t.top) alternatives[std::string(tokenizer->tokenPiece(id, false))] = lp;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", tokenLogprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json ReplyShape::complete(const std::string& text, const std::vector<TokenLogprob>& logprobs,
                          const GenerationStats& stats) const {
  json choice = {
      {"index", 0}, {"logprobs", logprobsJson(logprobs, 0)}, {"finish_reason", finishReason(stats.stopReason)}};
  json out;
  if (endpoint == Endpoint::kChat) {
    out = envelope("chat.completion");
    choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  } else {
    out = envelope("text_completion");
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  out["usage"] = usage(stats);
  return out;
}

json ReplyShape::chunk(const std::string& text, const std::vector<TokenLogprob>& logprobs, bool role) const {
  json choice = {{"index", 0}, {"logprobs", logprobsJson(logprobs, 0)}, {"finish_reason", nullptr}};
  json out;
  if (endpoint == Endpoint::kChat) {
    out = envelope("chat.completion.chunk");
    json delta = {{"content", text}};
    if (role) delta["role"] = "assistant";
    choice["delta"] = delta;
  } else {
    out = envelope("text_completion");
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  out["usage"] = nullptr;
  return out;
}

std::string ReplyShape::textChunk(const std::string& text) const {
  return textChunkPrefix + dumpJson(text) + textChunkSuffix;
}

json ReplyShape::finalChunk(const GenerationStats& stats) const {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finishReason(stats.stopReason)}};
  json out;
  if (endpoint == Endpoint::kChat) {
    out = envelope("chat.completion.chunk");
    choice["delta"] = json::object();
  } else {
    out = envelope("text_completion");
    choice["text"] = "";
  }
  out["choices"] = json::array({choice});
  out["usage"] = nullptr;
  return out;
}

json ReplyShape::usageChunk(const GenerationStats& stats) const {
  json out = envelope(endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage(stats);
  return out;
}

}  // namespace jitllm::server::http
