#include "ctl/json_views.h"

namespace jitllm::ctl {

void writeJson(JsonWriter& j, const client::Version& v) {
  j.beginObject();
  j.field("version", std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch));
  j.field("major", v.major).field("minor", v.minor).field("patch", v.patch);
  j.field("protocol", v.protocol).field("build", v.build);
  j.endObject();
}

void writeJson(JsonWriter& j, const client::DeviceInfo& d) {
  j.beginObject();
  j.field("id", d.id).field("backend", d.backend).field("name", d.name);
  j.field("memoryTotal", d.memoryTotal).field("memoryUsed", d.memoryUsed);
  j.field("threads", d.threads).field("software", d.software);
  j.key("telemetry").beginObject();
  j.field("temperatureC", d.telemetry.temperatureC).field("utilization", d.telemetry.utilization);
  j.field("powerWatts", d.telemetry.powerWatts);
  j.endObject();
  j.endObject();
}

void writeJson(JsonWriter& j, const client::ModelInfo& m) {
  j.beginObject();
  j.field("name", m.name).field("path", m.path).field("architecture", m.architecture);
  j.field("fileBytes", m.fileBytes).field("layers", m.layers).field("vocabSize", m.vocabSize);
  j.field("contextLength", m.contextLength).field("contextSize", m.contextSize);
  j.key("placement").beginArray();
  for (const auto& p : m.placement) {
    j.beginObject();
    j.field("first", p.first).field("last", p.last).field("device", p.device);
    j.field("firstName", p.firstName).field("lastName", p.lastName);
    j.endObject();
  }
  j.endArray();
  j.key("memory").beginArray();
  for (const auto& mem : m.memory) {
    j.beginObject().field("device", mem.device).field("weightBytes", mem.weightBytes).field("kvBytes", mem.kvBytes).endObject();
  }
  j.endArray();
  j.key("sessions").beginArray();
  for (const auto& s : m.sessions) {
    j.beginObject();
    j.field("id", s.id).field("ownerUid", s.ownerUid).field("tokens", s.tokens);
    j.field("contextLimit", s.contextLimit).field("state", s.state);
    j.endObject();
  }
  j.endArray();
  j.field("chatTemplate", m.chatTemplate).field("loadedUnixMs", m.loadedUnixMs);
  j.endObject();
}

void writeJson(JsonWriter& j, const client::Event& e) {
  j.beginObject();
  j.field("unixMs", e.unixMs).field("kind", client::eventKindName(e.kind)).field("what", e.what);
  j.field("model", e.model).field("device", e.device).field("sessionId", e.sessionId).field("message", e.message);
  j.endObject();
}

void writeJson(JsonWriter& j, const client::GenerationStats& s) {
  j.beginObject();
  j.field("promptTokens", s.promptTokens).field("generatedTokens", s.generatedTokens);
  j.field("timeToFirstTokenMs", s.timeToFirstTokenMs).field("tokensPerSecond", s.tokensPerSecond);
  j.field("totalMs", s.totalMs).field("stopReason", client::stopReasonName(s.stopReason));
  j.field("sessionId", s.sessionId);
  j.endObject();
}

void writeResultFields(JsonWriter& j, const client::GenerateResult& r) {
  j.key("tokens").beginArray();
  for (int32_t id : r.tokens) j.value(id);
  j.endArray();
  j.field("text", r.text);
  j.key("stats");
  writeJson(j, r.stats);
  j.field("cancelled", r.cancelled);
}

}  // namespace jitllm::ctl
