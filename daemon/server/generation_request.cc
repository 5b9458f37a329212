#include "daemon/server/generation_request.h"

#include <string>

namespace jitllm::server {
namespace {

[[noreturn]] void reject(RequestField field, const std::string& message) { throw RequestError(field, message); }

void validatePrompt(const GenerationRequest& r) {
  if (r.chat) {
    if (r.text || !r.prompt.empty()) reject(RequestField::kPrompt, "a conversation's prompt is its messages alone");
    if (r.messages.empty()) reject(RequestField::kMessages, "the conversation is empty: send at least one message");
    for (const runtime::ChatMessage& m : r.messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant") {
        reject(RequestField::kMessages, "unknown role '" + m.role + "': a message's role is system, user or assistant");
      }
    }
    return;
  }
  if (!r.messages.empty()) reject(RequestField::kMessages, "messages make a conversation (a chat request)");
  if (r.text && !r.prompt.empty()) reject(RequestField::kPrompt, "give the prompt as text or as token ids, not both");
  if (r.text ? r.text->empty() : r.prompt.empty()) reject(RequestField::kPrompt, "the prompt is empty");
  for (int32_t id : r.prompt) {
    if (id < 0) reject(RequestField::kPrompt, "token id " + std::to_string(id) + " is negative");
  }
}

RequestField fieldOf(runtime::SamplingParams::Param p) {
  using P = runtime::SamplingParams::Param;
  switch (p) {
    case P::kTemperature:
      return RequestField::kTemperature;
    case P::kTopK:
      return RequestField::kTopK;
    case P::kTopP:
      return RequestField::kTopP;
    case P::kMinP:
      return RequestField::kMinP;
    case P::kRepeatPenalty:
      return RequestField::kRepeatPenalty;
    case P::kRepeatLastN:
      return RequestField::kRepeatLastN;
  }
  return RequestField::kTemperature;
}

}  // namespace

void GenerationRequest::setPrompt(std::vector<int32_t> tokens) {
  prompt = std::move(tokens);
  messages.clear();
  text.reset();
}

void validateRequest(const GenerationRequest& r) {
  validatePrompt(r);
  if (r.maxTokens < 1 || r.maxTokens > kMaxTokensPerRequest) {
    reject(RequestField::kMaxTokens, "the reply's token limit must be between 1 and " +
                                         std::to_string(kMaxTokensPerRequest) + ", not " + std::to_string(r.maxTokens));
  }
  if (r.stops.size() > kMaxStopStrings) {
    reject(RequestField::kStop, "at most " + std::to_string(kMaxStopStrings) + " stop strings");
  }
  for (const std::string& s : r.stops) {
    if (s.empty() || s.size() > kMaxStopStringBytes) {
      reject(RequestField::kStop, "stop strings are 1 to " + std::to_string(kMaxStopStringBytes) + " bytes");
    }
  }
  if (auto problem = r.sampling.firstProblem()) reject(fieldOf(problem->param), problem->message);
  if (r.contextLimit < 0) reject(RequestField::kContextSize, "the context size must not be negative");
  if (r.topLogprobs < -1 || r.topLogprobs > kMaxTopLogprobs) {
    reject(RequestField::kTopLogprobs, "at most " + std::to_string(kMaxTopLogprobs) + " alternatives per token");
  }
}

}  // namespace jitllm::server
