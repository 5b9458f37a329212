#include "daemon/server/rpc_generation.h"

#include <string>

namespace jitllm::server {
namespace {

runtime::SamplingParams samplingFrom(rpc::SamplingParams::Reader s) {
  runtime::SamplingParams p;
  p.temperature = s.getTemperature();
  p.topK = s.getTopK();
  p.topP = s.getTopP();
  p.minP = s.getMinP();
  p.repeatPenalty = s.getRepeatPenalty();
  p.repeatLastN = s.getRepeatLastN();
  p.seed = s.getSeed();
  return p;
}

std::optional<ServiceTier> tierFrom(capnp::Text::Reader name) {
  if (name.size() == 0) return std::nullopt;
  const std::string_view text(name.cStr(), name.size());
  if (auto tier = parseTier(text)) return tier;
  throw RequestError(RequestField::kTier, "unknown tier '" + std::string(text) + "': interactive, standard or batch");
}

// What GenerateRequest and ChatRequest share.
template <typename Reader>
GenerationRequest common(Reader r) {
  GenerationRequest q;
  q.model = r.getModel();
  q.maxTokens = r.getMaxTokens();
  q.sampling = samplingFrom(r.getSampling());
  for (auto s : r.getStop()) q.stops.emplace_back(s.cStr(), s.size());
  q.contextLimit = r.getContextSize();
  q.requestedTier = tierFrom(r.getTier());
  return q;
}

rpc::StopReason toRpc(runtime::StopReason r) {
  switch (r) {
    case runtime::StopReason::kMaxTokens:
      return rpc::StopReason::MAX_TOKENS;
    case runtime::StopReason::kEndOfGeneration:
      return rpc::StopReason::END_OF_GENERATION;
    case runtime::StopReason::kStopString:
      return rpc::StopReason::STOP_STRING;
    case runtime::StopReason::kContextFull:
      return rpc::StopReason::CONTEXT_FULL;
  }
  return rpc::StopReason::MAX_TOKENS;
}

}  // namespace

GenerationRequest requestFromRpc(rpc::GenerateRequest::Reader r) {
  GenerationRequest q = common(r);
  if (r.getPrompt().isText()) {
    const auto t = r.getPrompt().getText();
    q.text = std::string(t.cStr(), t.size());
  } else {
    for (int32_t id : r.getPrompt().getTokens()) q.prompt.push_back(id);
  }
  q.ignoreEndOfGeneration = r.getIgnoreEndOfGeneration();
  return q;
}

GenerationRequest requestFromRpc(rpc::ChatRequest::Reader r) {
  GenerationRequest q = common(r);
  q.chat = true;
  for (auto m : r.getMessages()) q.messages.push_back({m.getRole(), m.getContent()});
  return q;
}

const char* rpcFieldName(RequestField field) {
  switch (field) {
    case RequestField::kModel:
      return "model";
    case RequestField::kPrompt:
      return "prompt";
    case RequestField::kMessages:
      return "messages";
    case RequestField::kMaxTokens:
      return "maxTokens";
    case RequestField::kStop:
      return "stop";
    case RequestField::kTemperature:
      return "sampling.temperature";
    case RequestField::kTopK:
      return "sampling.topK";
    case RequestField::kTopP:
      return "sampling.topP";
    case RequestField::kMinP:
      return "sampling.minP";
    case RequestField::kRepeatPenalty:
      return "sampling.repeatPenalty";
    case RequestField::kRepeatLastN:
      return "sampling.repeatLastN";
    case RequestField::kContextSize:
      return "contextSize";
    case RequestField::kTopLogprobs:
      return "topLogprobs";
    case RequestField::kTier:
      return "tier";
  }
  return "request";
}

Error rpcErrorFor(const RequestError& e) {
  return Error(ErrorKind::kFailed, std::string(rpcFieldName(e.field())) + ": " + e.what());
}

void fillStats(const GenerationStats& s, rpc::GenerationStats::Builder st) {
  st.setPromptTokens(s.promptTokens);
  st.setGeneratedTokens(s.generatedTokens);
  st.setTimeToFirstTokenMs(s.timeToFirstTokenMs);
  st.setTokensPerSecond(s.tokensPerSecond);
  st.setTotalMs(s.totalMs);
  st.setStopReason(toRpc(s.stopReason));
  st.setSessionId(s.sessionId);
  st.setReusedTokens(s.reusedTokens);
  const std::string tier(tierName(s.tier));
  st.setTier(tier);
  st.setMetTargets(s.metTargets);
}

}  // namespace jitllm::server
