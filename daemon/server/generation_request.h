// The one request every surface builds: what a client asked the daemon to generate, in the
// daemon's own terms, whether it came as Cap'n Proto `generate` or `chat`, or over HTTP.
//
// A surface (rpc_request.h, daemon/http/openai_request.h, ...) only translates its wire format
// into a GenerationRequest: types, its API's own spellings and its API's own limits. What jitllmd
// itself requires of any request - a prompt in exactly one form, a reply of at least one token,
// bounded stop strings, sampling in range - is checked once, by validateRequest(), where the
// request enters (GenerationIntake). A failure names the field as a RequestField, which each
// surface spells its own way (`maxTokens` on the RPC, `max_tokens` over HTTP).
//
// The prompt arrives as chat messages, text or token ids; GenerationIntake turns the first two
// into `prompt` (the model's chat template, its tokenizer) off the event loop, and the model's
// worker then only ever sees tokens.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "daemon/server/service_tier.h"
#include "engine/chat/chat_template.h"
#include "engine/runtime/sampler.h"

namespace jitllm::server {

// Bounds on what one request may ask for, so that a client cannot make the daemon allocate
// without limit (each transport bounds the message itself).
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr uint32_t kMaxTokensPerRequest = 1 << 20;
inline constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's limit; what any surface may ask

struct GenerationRequest {
  // The model as the client named it (routing happens before the request reaches a model).
  std::string model;
  // The prompt, in exactly one of three forms: a conversation (`chat`: its messages, rendered with
  // the model's chat template), text (tokenized with the model's special tokens and BOS), or token
  // ids. After the intake has prepared it, `prompt` holds the tokens and the other two are empty.
  bool chat = false;
  std::vector<runtime::ChatMessage> messages;
  std::optional<std::string> text;
  std::vector<int32_t> prompt;

  uint32_t maxTokens = 128;
  runtime::SamplingParams sampling;
  std::vector<std::string> stops;
  int64_t contextLimit = 0;            // 0: the model's default
  bool ignoreEndOfGeneration = false;  // benchmarks: maxTokens whatever the tokens
  // >= 0: each token comes with its TokenLogprob and this many alternatives (the full row of
  // logits then comes to the host every step); -1: none.
  int32_t topLogprobs = -1;
  // The tier the client named (unset: its default); `tier` is what the intake resolved for the
  // caller (resolveTier), the one the reply runs in.
  std::optional<ServiceTier> requestedTier;
  ServiceTier tier = ServiceTier::kStandard;
  uint32_t ownerUid = 0;  // set by the intake from the caller

  bool promptPrepared() const { return !prompt.empty() && messages.empty() && !text; }
  // Clears the forms that `tokens` replaces.
  void setPrompt(std::vector<int32_t> tokens);
};

// The fields of a request a failure can name; each surface has its own spelling for them.
enum class RequestField {
  kModel,
  kPrompt,
  kMessages,
  kMaxTokens,
  kStop,
  kTemperature,
  kTopK,
  kTopP,
  kMinP,
  kRepeatPenalty,
  kRepeatLastN,
  kContextSize,
  kTopLogprobs,
  kTier,
};

// A request jitllmd will not run, and the field at fault. The message is a whole sentence in
// words of no particular surface; a surface adds its own name of the field (the RPC as a prefix,
// HTTP as the error's `param`). `forbidden`: the request is well formed but the caller may not
// make it (a tier more urgent than theirs); else it is malformed.
class RequestError final : public std::exception {
 public:
  RequestError(RequestField field, std::string message, bool forbidden = false)
      : field_(field), message_(std::move(message)), forbidden_(forbidden) {}
  RequestField field() const { return field_; }
  bool forbidden() const { return forbidden_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  RequestField field_;
  std::string message_;
  bool forbidden_;
};

// Throws RequestError for the first field that breaks jitllmd's own rules (see the top).
void validateRequest(const GenerationRequest& request);

}  // namespace jitllm::server
