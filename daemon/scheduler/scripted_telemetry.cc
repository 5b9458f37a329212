#include "daemon/scheduler/scripted_telemetry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "base/regular_file.h"

namespace jitllm::scheduler {
namespace {

double parseNumber(const std::string& text, const std::string& where, bool bytes) {
  std::string digits = text;
  double scale = 1;
  if (bytes && !digits.empty()) {
    const char suffix = digits.back();
    if (suffix == 'K' || suffix == 'M' || suffix == 'G') {
      scale = suffix == 'K' ? 1024.0 : suffix == 'M' ? 1024.0 * 1024 : 1024.0 * 1024 * 1024;
      digits.pop_back();
    }
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  JITLLM_REQUIRE(!digits.empty() && ec == std::errc() && ptr == digits.data() + digits.size() && v >= 0, where, ": '",
                 text, "' is not a number", bytes ? " of bytes (K, M, G suffixes allowed)" : "");
  return v * scale;
}

}  // namespace

ScriptedTelemetry ScriptedTelemetry::parse(const std::string& text, const std::string& origin) {
  ScriptedTelemetry t;
  std::istringstream in(text);
  int lineNo = 0;
  for (std::string line; std::getline(in, line);) {
    lineNo++;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string at;
    if (!(words >> at)) continue;
    const std::string where = origin + ":" + std::to_string(lineNo);
    Entry e;
    e.atMs = int64_t(parseNumber(at, where, false));
    JITLLM_REQUIRE(bool(words >> e.device), where, ": expected 'AT_MS DEVICE KEY=VALUE ...'");
    for (std::string kv; words >> kv;) {
      const size_t eq = kv.find('=');
      JITLLM_REQUIRE(eq != std::string::npos, where, ": '", kv, "' is not KEY=VALUE");
      const std::string key = kv.substr(0, eq);
      JITLLM_REQUIRE(key == "temp" || key == "mem_used" || key == "mem_total" || key == "present", where,
                     ": unknown key '", key, "' (temp, mem_used, mem_total, present)");
      const std::string value = kv.substr(eq + 1);
      if (key == "present") {
        JITLLM_REQUIRE(value == "0" || value == "1", where, ": present is 0 or 1, not '", value, "'");
        e.values[key] = value == "1" ? 1 : 0;
        continue;
      }
      e.values[key] = parseNumber(value, where, key != "temp");
    }
    JITLLM_REQUIRE(!e.values.empty(), where, ": no values for ", e.device);
    t.entries_.push_back(std::move(e));
  }
  std::stable_sort(t.entries_.begin(), t.entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.atMs < b.atMs; });
  return t;
}

namespace {

std::optional<std::string> readText(const std::string& path) {
  try {
    return readRegularFile(path, "the telemetry script");
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

ScriptedTelemetry ScriptedTelemetry::load(const std::string& path) {
  const auto text = readText(path);
  JITLLM_REQUIRE(text.has_value(), "cannot read the telemetry script '", path, "'");
  ScriptedTelemetry t = parse(*text, path);
  t.path_ = path;
  t.loadedText_ = *text;
  return t;
}

void ScriptedTelemetry::followFile() {
  if (path_.empty()) return;
  const auto text = readText(path_);
  if (!text || *text == loadedText_) return;
  try {
    entries_ = parse(*text, path_).entries_;
  } catch (const Error& e) {
    spdlog::error("telemetry script changed but does not parse, keeping the previous one: {}", e.what());
  }
  loadedText_ = *text;
}

DeviceTelemetry ScriptedTelemetry::read(const std::string& deviceId, int64_t nowMs) {
  followFile();
  std::map<std::string, double> current;  // each key as its latest line up to now sets it
  for (const Entry& e : entries_) {
    if (e.atMs > nowMs) break;
    if (e.device != deviceId) continue;
    for (const auto& [k, v] : e.values) current[k] = v;
  }
  DeviceTelemetry t;
  if (current.count("temp")) t.temperatureC = current["temp"];
  if (current.count("mem_used")) t.memoryUsed = size_t(current["mem_used"]);
  if (current.count("mem_total")) t.memoryTotal = size_t(current["mem_total"]);
  if (current.count("present")) t.present = current["present"] != 0;
  return t;
}

}  // namespace jitllm::scheduler
