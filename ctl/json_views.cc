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
  j.field("online", d.online).field("offlineReason", d.offlineReason);
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
    j.beginObject()
        .field("device", mem.device)
        .field("weightBytes", mem.weightBytes)
        .field("kvBytes", mem.kvBytes)
        .endObject();
  }
  j.endArray();
  for (const auto& [key, list] : {std::pair{"sessions", &m.sessions}, std::pair{"idleSessions", &m.idleSessions}}) {
    j.key(key).beginArray();
    for (const auto& s : *list) {
      j.beginObject();
      j.field("id", s.id).field("ownerUid", s.ownerUid).field("tokens", s.tokens);
      j.field("contextLimit", s.contextLimit).field("state", s.state).field("tier", s.tier);
      j.endObject();
    }
    j.endArray();
  }
  j.key("goodput").beginArray();
  for (const auto& g : m.goodput) {
    j.beginObject().field("tier", g.tier).field("ttftTargetMs", g.ttftTargetMs).field("tpotTargetMs", g.tpotTargetMs);
    j.field("finished", g.finished).field("met", g.met).field("metPerSecond", g.metPerSecond).endObject();
  }
  j.endArray();
  j.field("parkedKvBytes", m.parkedKvBytes);
  j.field("state", m.state);
  j.field("chatTemplate", m.chatTemplate).field("loadedUnixMs", m.loadedUnixMs);
  j.key("layerStates").beginArray();
  for (const auto& l : m.layerStates) writeJson(j, l);
  j.endArray();
  j.field("migration", m.migration);
  j.endObject();
}

void writeJson(JsonWriter& j, const client::LayerState& l) {
  j.beginObject();
  j.field("unit", l.unit).field("name", l.name).field("device", l.device).field("residency", l.residency);
  j.field("stagedOn", l.stagedOn).field("weightBytes", l.weightBytes).field("kernelsReady", l.kernelsReady);
  j.field("pinned", l.pinned).field("kvPages", l.kvPages).field("kvBytes", l.kvBytes);
  j.key("sessions").beginArray();
  for (const auto& s : l.sessions) j.beginObject().field("sessionId", s.sessionId).field("pages", s.pages).endObject();
  j.endArray();
  j.endObject();
}

void writeJson(JsonWriter& j, const client::MigrationStats& s) {
  j.beginObject();
  j.field("id", s.id).field("model", s.model).field("first_name", s.firstName).field("last_name", s.lastName);
  j.field("from", s.from).field("to", s.to).field("units", s.units).field("committed", s.committed);
  j.field("prepare_ms", s.prepareMs).field("pause_ms", s.pauseMs);
  j.field("bytes_precopied", s.bytesPrecopied).field("bytes_in_pause", s.bytesInPause);
  j.field("weight_bytes", s.weightBytes).field("recomputed_tokens", s.recomputedTokens).field("sessions", s.sessions);
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
  j.field("sessionId", s.sessionId).field("reusedTokens", s.reusedTokens);
  j.field("tier", s.tier).field("metTargets", s.metTargets);
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
