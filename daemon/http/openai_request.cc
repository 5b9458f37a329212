#include "daemon/http/openai_request.h"

#include <cfloat>
#include <cmath>
#include <nlohmann/json.hpp>

#include "daemon/http/http_error.h"
#include "daemon/server/daemon_config.h"

namespace jitllm::server::http {
namespace {

using nlohmann::json;

const char* typeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

[[noreturn]] void wrongType(const std::string& param, const char* expected, const json& got) {
  throw HttpError::badParameter(param, "'" + param + "' must be " + expected + ", not " + typeName(got));
}

// The field, or nullptr when absent or null (OpenAI treats an explicit null as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) wrongType(param, "a number", v);
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) {
    throw HttpError::badParameter(
        param, "'" + param + "' must be between " + json(lo).dump() + " and " + json(hi).dump() + ", not " + v.dump());
  }
  return d;
}

int64_t integer(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) wrongType(param, "an integer", v);
  const int64_t i = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
  if (i < lo || i > hi) {
    throw HttpError::badParameter(param, "'" + param + "' must be between " + std::to_string(lo) + " and " +
                                             std::to_string(hi) + ", not " + v.dump());
  }
  return i;
}

bool boolean(const json& v, const std::string& param) {
  if (!v.is_boolean()) wrongType(param, "a boolean", v);
  return v.get<bool>();
}

// A message's content: a string, or an array of parts of which only text parts are understood.
std::string messageContent(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrongType(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); i++) {
    const json& part = content[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrongType(where, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text") {
      throw HttpError::badParameter(where + ".type", "only content parts of type 'text' are supported");
    }
    const json* t = field(part, "text");
    if (!t || !t->is_string()) wrongType(where + ".text", "a string", t ? *t : json());
    text += t->get<std::string>();
  }
  return text;
}

std::vector<runtime::ChatMessage> messages(const json& body) {
  const json* list = field(body, "messages");
  if (!list) throw HttpError::badParameter("messages", "'messages' is required");
  if (!list->is_array()) wrongType("messages", "an array", *list);
  std::vector<runtime::ChatMessage> out;
  for (size_t i = 0; i < list->size(); i++) {
    const json& m = (*list)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrongType(where, "an object", m);
    const json* role = field(m, "role");
    if (!role || !role->is_string()) wrongType(where + ".role", "a string", role ? *role : json());
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    const json* content = field(m, "content");
    out.push_back({r, content ? messageContent(*content, where + ".content") : std::string()});
  }
  return out;
}

std::vector<std::string> stops(const json& v) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& s : v) {
      if (!s.is_string()) wrongType("stop", "a string or an array of strings", v);
      out.push_back(s.get<std::string>());
    }
  } else {
    wrongType("stop", "a string or an array of strings", v);
  }
  if (out.size() > kOpenAiMaxStopStrings) {
    throw HttpError::badParameter("stop", "at most " + std::to_string(kOpenAiMaxStopStrings) + " stop strings");
  }
  return out;
}

void prompt(const json& body, GenerationRequest& r) {
  const json* v = field(body, "prompt");
  if (!v) throw HttpError::badParameter("prompt", "'prompt' is required");
  const json* one = v;
  // An array of one prompt is one prompt; several would be several choices (n > 1).
  if (v->is_array() && !v->empty() && !(*v)[0].is_number()) {
    if (v->size() != 1) throw HttpError::badParameter("prompt", "one prompt per request is supported");
    one = &(*v)[0];
  }
  if (one->is_string()) {
    r.text = one->get<std::string>();
  } else if (one->is_array()) {
    for (const json& id : *one) r.prompt.push_back(int32_t(integer(id, "prompt", 0, INT32_MAX)));
  } else {
    wrongType("prompt", "a string, an array of token ids or an array of one string", *one);
  }
}

// OpenAI's logprobs: chat's `logprobs` (a boolean) with `top_logprobs`, completions' `logprobs`
// (how many alternatives).
int32_t topLogprobs(const json& body, Endpoint endpoint) {
  if (endpoint == Endpoint::kCompletions) {
    const json* v = field(body, "logprobs");
    return v ? int32_t(integer(*v, "logprobs", 0, INT32_MAX)) : -1;
  }
  const bool logprobs = field(body, "logprobs") ? boolean(body["logprobs"], "logprobs") : false;
  if (const json* v = field(body, "top_logprobs")) {
    if (!logprobs) throw HttpError::badParameter("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return int32_t(integer(*v, "top_logprobs", 0, INT32_MAX));
  }
  return logprobs ? 0 : -1;
}

void sampling(const json& body, runtime::SamplingParams& s) {
  if (const json* v = field(body, "temperature")) s.temperature = float(number(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) s.topP = float(number(*v, "top_p", 0, 1));
  if (const json* v = field(body, "seed")) s.seed = uint64_t(integer(*v, "seed", INT64_MIN, INT64_MAX));
  if (const json* v = field(body, "frequency_penalty")) number(*v, "frequency_penalty", 0, 0);
  if (const json* v = field(body, "presence_penalty")) number(*v, "presence_penalty", 0, 0);
  // Beyond OpenAI's set, what llama.cpp's server and Ollama accept too (their ranges: jitllmd's).
  if (const json* v = field(body, "top_k")) s.topK = int32_t(integer(*v, "top_k", INT32_MIN, INT32_MAX));
  if (const json* v = field(body, "min_p")) s.minP = float(number(*v, "min_p", -FLT_MAX, FLT_MAX));
  if (const json* v = field(body, "repeat_penalty"))
    s.repeatPenalty = float(number(*v, "repeat_penalty", -FLT_MAX, FLT_MAX));
}

// Fields OpenAI has and jitllmd cannot honour: refused when given a value that asks for them.
void refuseUnsupported(const json& body, Endpoint endpoint) {
  if (const json* v = field(body, "n")) integer(*v, "n", 1, 1);
  if (const json* v = field(body, "best_of")) integer(*v, "best_of", 1, 1);
  if (endpoint == Endpoint::kChat) {
    for (const char* unsupported : {"tools", "functions", "response_format", "logit_bias"}) {
      if (const json* v = field(body, unsupported);
          v && !(v->is_array() && v->empty()) && !(v->is_object() && v->empty())) {
        throw HttpError::badParameter(unsupported, std::string("'") + unsupported + "' is not supported by jitllmd");
      }
    }
  } else if (const json* v = field(body, "suffix")) {
    if (!v->is_string() || !v->get<std::string>().empty()) {
      throw HttpError::badParameter("suffix", "'suffix' is not supported by jitllmd");
    }
  }
}

std::optional<double> keepAlive(const json& v) {
  std::optional<double> seconds;
  if (v.is_number()) seconds = v.get<double>() < 0 ? -1.0 : v.get<double>();
  if (v.is_string()) seconds = parseKeepAlive(v.get<std::string>());
  if (!seconds) throw HttpError::badParameter("keep_alive", "'keep_alive' is seconds, or a duration such as 5m, or -1");
  return seconds;
}

std::string string(const json& v, const char* param) {
  if (!v.is_string()) wrongType(param, "a string", v);
  return v.get<std::string>();
}

}  // namespace

CompletionParams parseCompletionRequest(Endpoint endpoint, const std::string& text) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    throw HttpError(400, "invalid_request_error", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw HttpError(400, "invalid_request_error", "the body must be a JSON object");
  CompletionParams p;
  p.endpoint = endpoint;
  GenerationRequest& r = p.request;
  const json* model = field(body, "model");
  if (!model) throw HttpError::badParameter("model", "'model' is required");
  r.model = string(*model, "model");
  if (endpoint == Endpoint::kChat) {
    r.chat = true;
    r.messages = messages(body);
    r.maxTokens = kMaxTokensPerRequest;
  } else {
    prompt(body, r);
    r.maxTokens = kCompletionsDefaultMaxTokens;
  }
  // max_completion_tokens is the chat API's newer name; either may be given.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (const json* v = field(body, name)) r.maxTokens = uint32_t(integer(*v, name, 0, UINT32_MAX));
  }
  sampling(body, r.sampling);
  if (const json* v = field(body, "ignore_eos")) r.ignoreEndOfGeneration = boolean(*v, "ignore_eos");
  if (const json* v = field(body, "stop")) r.stops = stops(*v);
  r.topLogprobs = topLogprobs(body, endpoint);
  refuseUnsupported(body, endpoint);
  if (const json* v = field(body, "stream")) p.stream = boolean(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) wrongType("stream_options", "an object", *v);
    if (!p.stream) throw HttpError::badParameter("stream_options", "'stream_options' needs 'stream': true");
    if (const json* u = field(*v, "include_usage")) p.includeUsage = boolean(*u, "stream_options.include_usage");
  }
  if (endpoint == Endpoint::kCompletions) {
    if (const json* v = field(body, "echo")) p.echo = boolean(*v, "echo");
  }
  if (const json* v = field(body, "keep_alive")) p.keepAliveSeconds = keepAlive(*v);
  if (const json* v = field(body, "service_tier")) {
    const std::string name = string(*v, "service_tier");
    r.requestedTier = tierFromOpenAi(name);
    if (!r.requestedTier) {
      throw HttpError::badParameter("service_tier",
                                    "'service_tier' is auto, default, flex or priority, not '" + name + "'");
    }
  }
  if (const json* v = field(body, "user")) p.user = string(*v, "user");
  return p;
}

namespace {

std::string openAiParam(RequestField field, Endpoint endpoint) {
  switch (field) {
    case RequestField::kModel:
      return "model";
    case RequestField::kPrompt:
      return endpoint == Endpoint::kChat ? "messages" : "prompt";
    case RequestField::kMessages:
      return "messages";
    case RequestField::kMaxTokens:
      return "max_tokens";
    case RequestField::kStop:
      return "stop";
    case RequestField::kTemperature:
      return "temperature";
    case RequestField::kTopK:
      return "top_k";
    case RequestField::kTopP:
      return "top_p";
    case RequestField::kMinP:
      return "min_p";
    case RequestField::kRepeatPenalty:
      return "repeat_penalty";
    case RequestField::kRepeatLastN:
      return "repeat_last_n";
    case RequestField::kContextSize:
      return "context_size";
    case RequestField::kTopLogprobs:
      return endpoint == Endpoint::kChat ? "top_logprobs" : "logprobs";
    case RequestField::kTier:
      return "service_tier";
  }
  return "body";
}

}  // namespace

HttpError openAiErrorFor(const RequestError& e, Endpoint endpoint) {
  const std::string param = openAiParam(e.field(), endpoint);
  if (e.forbidden()) return HttpError(403, "permission_error", e.what(), param);
  return HttpError::badParameter(param, "'" + param + "': " + e.what());
}

}  // namespace jitllm::server::http
