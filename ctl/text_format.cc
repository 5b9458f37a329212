#include "ctl/text_format.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace jitllm::ctl {

std::string TextTable::render() const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); i++) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); i++) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += '\n';
  }
  return out;
}

std::string humanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    unit++;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string isoTime(int64_t unixMs) {
  const std::time_t seconds = std::time_t(unixMs / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(unixMs % 1000));
  return buf;
}

std::string templateLabel(const client::ModelInfo& m) {
  return m.chatTemplate.empty() ? "no template" : m.chatTemplate + " template";
}

std::string placementSummary(const client::ModelInfo& m) {
  std::string out;
  for (const auto& p : m.placement) {
    if (!out.empty()) out += ", ";
    out += p.device + " " + p.firstName;
    if (p.last != p.first) out += ".." + p.lastName;
  }
  return out.empty() ? "-" : out;
}

std::string eventLine(const client::Event& e) {
  // "model.loaded" whether the daemon says "loaded" or "model.loaded"; a name with a prefix of its
  // own ("layers.pinned", of kind migration) as it is.
  const std::string kind = client::eventKindName(e.kind);
  std::string out = isoTime(e.unixMs) + "  ";
  if (e.what.find('.') == std::string::npos) out += kind + ".";
  out += e.what;
  if (!e.model.empty()) out += " model=" + e.model;
  if (!e.device.empty()) out += " device=" + e.device;
  if (e.sessionId != 0) out += " session=" + std::to_string(e.sessionId);
  if (!e.message.empty()) out += ": " + e.message;
  return out;
}

std::string statsLine(const client::GenerationStats& s) {
  char buf[200];
  if (s.stopReason == client::StopReason::kCancelled) {
    std::snprintf(buf, sizeof(buf), "%u tokens, cancelled", s.generatedTokens);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "%u prompt + %u generated tokens, first after %.1f ms, %.1f tok/s, %s (session %llu)", s.promptTokens,
                  s.generatedTokens, s.timeToFirstTokenMs, s.tokensPerSecond, client::stopReasonName(s.stopReason),
                  static_cast<unsigned long long>(s.sessionId));
  }
  return buf;
}

std::string unitRange(const std::string& model, const std::string& firstName, const std::string& lastName) {
  if (firstName.empty() && lastName.empty()) return model;
  std::string out = model + ":" + (firstName.empty() ? lastName : firstName);
  if (!lastName.empty() && lastName != firstName && !firstName.empty()) out += "-" + lastName;
  return out;
}

std::string migrationSummary(const client::MigrationStats& s) {
  std::string out = unitRange(s.model, s.firstName, s.lastName);
  out += " (" + std::to_string(s.units) + (s.units == 1 ? " unit) " : " units) ");
  out += (s.from.empty() ? "?" : s.from) + " -> " + s.to;
  out += ", " + humanBytes(s.weightBytes) + " of weights";
  return out;
}

std::string migrationStarted(const client::MigrationStats& s) {
  std::string out = "migration " + std::to_string(s.id) + " started: " + unitRange(s.model, s.firstName, s.lastName);
  if (s.units > 0) out += " (" + std::to_string(s.units) + (s.units == 1 ? " unit)" : " units)");
  if (!s.from.empty()) out += " " + s.from;
  return out + " -> " + s.to;
}

std::string migrationStatsLine(const client::MigrationStats& s) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "pause_ms %.3f  prepare_ms %.1f  bytes_precopied %llu  bytes_in_pause %llu  recomputed_tokens %u  "
                "sessions %u",
                s.pauseMs, s.prepareMs, static_cast<unsigned long long>(s.bytesPrecopied),
                static_cast<unsigned long long>(s.bytesInPause), s.recomputedTokens, s.sessions);
  return buf;
}

std::string layerTable(const client::ModelInfo& m) {
  if (m.layerStates.empty()) return "(this jitllmd reports no per-layer state: it is older than jitllmctl)\n";
  TextTable t(
      {"UNIT", "NAME", "DEVICE", "RESIDENCY", "WEIGHTS", "KERNELS", "PINNED", "KV PAGES", "KV BYTES", "SESSION:PAGES"});
  for (const auto& l : m.layerStates) {
    std::string residency = l.residency.empty() ? "-" : l.residency;
    if (!l.stagedOn.empty()) residency += " staged on " + l.stagedOn;
    std::string sessions;
    for (const auto& s : l.sessions) {
      if (!sessions.empty()) sessions += ' ';
      sessions += std::to_string(s.sessionId) + ":" + std::to_string(s.pages);
    }
    t.add({std::to_string(l.unit), l.name, l.device.empty() ? "-" : l.device, residency, humanBytes(l.weightBytes),
           l.kernelsReady ? "yes" : "no", l.pinned.empty() ? "-" : l.pinned, std::to_string(l.kvPages),
           humanBytes(l.kvBytes), sessions.empty() ? "-" : sessions});
  }
  return t.render();
}

}  // namespace jitllm::ctl
