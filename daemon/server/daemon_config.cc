#include "daemon/server/daemon_config.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "base/byte_size.h"
#include "base/error.h"
#include "base/regular_file.h"
#include "policies/policy.h"

namespace jitllm::server {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

template <typename T>
T number(const std::string& v, const std::string& where, T lo, T hi) {
  T out{};
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  JITLLM_REQUIRE(ec == std::errc() && p == v.data() + v.size() && out >= lo && out <= hi, where, ": '", v,
                 "' is not a number in [", lo, ", ", hi, "]");
  return out;
}

std::vector<std::string> list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, ',');) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// tier_<name>_ttft_ms / tier_<name>_tpot_ms: the target it sets, or null for another key.
double* tierTargetKey(const std::string& key, TierConfig& tiers) {
  for (ServiceTier t : kAllServiceTiers) {
    const std::string prefix = "tier_" + std::string(tierName(t)) + "_";
    if (key == prefix + "ttft_ms") return &tiers.targets[size_t(t)].ttftMs;
    if (key == prefix + "tpot_ms") return &tiers.targets[size_t(t)].tpotMs;
  }
  return nullptr;
}

// Where the daemon listens, what it owns and loads, how it logs.
bool applyServingKey(DaemonConfig& c, const std::string& key, const std::string& value, const std::string& where) {
  if (key == "socket") {
    c.socketPath = value;
  } else if (key == "devices") {
    JITLLM_REQUIRE(!value.empty(), where, ": devices must not be empty");
    c.devices = value;
  } else if (key == "cpu_threads") {
    c.cpuThreads = number<int>(value, where, 0, 1024);
  } else if (key == "model_dirs") {
    c.modelDirs = list(value);
  } else if (key == "model_dir") {
    JITLLM_REQUIRE(!value.empty(), where, ": model_dir must not be empty");
    c.modelDirs.push_back(value);
  } else if (key == "default_context") {
    c.defaultContext = number<int64_t>(value, where, 16, int64_t(1) << 24);
  } else if (key == "admin_group") {
    c.adminGroup = value;
  } else if (key == "grace_period_seconds") {
    c.gracePeriodSeconds = number<double>(value, where, 0.0, 3600.0);
  } else if (key == "log_level") {
    JITLLM_REQUIRE(value == "trace" || value == "debug" || value == "info" || value == "warn" || value == "error",
                   where, ": log_level must be trace, debug, info, warn or error");
    c.logLevel = value;
  } else if (key == "preload") {
    c.preload = list(value);
  } else {
    return false;
  }
  return true;
}

// What a model, a user and the connections may hold at once.
bool applyLimitKey(DaemonConfig& c, const std::string& key, const std::string& value, const std::string& where) {
  if (key == "idle_sessions") {
    c.idleSessions = number<size_t>(value, where, 0, 10000);
  } else if (key == "max_sessions") {
    c.maxSessions = number<size_t>(value, where, 1, 100000);
  } else if (key == "max_sessions_per_uid") {
    c.maxSessionsPerUid = number<size_t>(value, where, 1, 100000);
  } else if (key == "max_connections_per_uid") {
    c.maxConnectionsPerUid = number<size_t>(value, where, 1, 100000);
  } else if (key == "handshake_timeout_ms") {
    c.handshakeTimeoutMs = number<int64_t>(value, where, 10, 3600000);
  } else if (key == "message_timeout_ms") {
    c.messageTimeoutMs = number<int64_t>(value, where, 10, 3600000);
  } else if (key == "idle_timeout_ms") {
    c.idleTimeoutMs = number<int64_t>(value, where, 0, int64_t(7) * 86400000);
  } else if (key == "max_inflight_bytes") {
    const auto bytes = parseByteSize(value);
    JITLLM_REQUIRE(bytes && *bytes >= (size_t(1) << 20), where,
                   ": max_inflight_bytes is a size of at least 1M, such as 64M, not '", value, "'");
    c.maxInflightBytes = *bytes;
  } else if (key == "max_queued_tokens") {
    c.maxQueuedTokens = number<size_t>(value, where, 1, 1 << 20);
  } else if (key == "http_max_connections") {
    c.httpMaxConnections = number<size_t>(value, where, 1, 1000000);
  } else {
    return false;
  }
  return true;
}

// The scheduler: its c.policy, telemetry and thresholds.
bool applySchedulerKey(DaemonConfig& c, const std::string& key, const std::string& value, const std::string& where) {
  if (key == "policy") {
    const std::vector<std::string>& names = policies::policyNames();
    if (std::find(names.begin(), names.end(), value) == names.end()) {
      std::string known;
      for (size_t i = 0; i < names.size(); i++) {
        known += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
      }
      JITLLM_FAIL(kFailed, where, ": policy must be ", known);
    }
    c.policy = value;
  } else if (key == "rescan_interval_ms") {
    c.rescanIntervalMs = number<int64_t>(value, where, 0, 86400000);
  } else if (key == "scheduler_interval_ms") {
    c.schedulerIntervalMs = number<int64_t>(value, where, 0, 3600000);
  } else if (key == "telemetry_script") {
    c.telemetryScript = value;
  } else if (key == "thermal_hot_c") {
    c.thermalHotC = number<double>(value, where, 20.0, 150.0);
  } else if (key == "thermal_cool_c") {
    c.thermalCoolC = number<double>(value, where, 0.0, 150.0);
    JITLLM_REQUIRE(c.thermalCoolC < c.thermalHotC, where, ": thermal_cool_c must be below thermal_hot_c (",
                   c.thermalHotC, ")");
  } else if (key == "thermal_cool_for_ms") {
    c.thermalCoolForMs = number<int64_t>(value, where, 0, 86400000);
  } else if (key == "pressure_high") {
    c.pressureHigh = number<double>(value, where, 0.1, 1.0);
  } else if (key == "pressure_low") {
    c.pressureLow = number<double>(value, where, 0.05, 1.0);
    JITLLM_REQUIRE(c.pressureLow < c.pressureHigh, where, ": pressure_low must be below pressure_high (",
                   c.pressureHigh, ")");
  } else if (key == "spill") {
    JITLLM_REQUIRE(value == "stream" || value == "cpu", where, ": spill is stream or cpu, not '", value, "'");
    c.spill = value;
  } else if (key == "speed_probe") {
    JITLLM_REQUIRE(value == "on" || value == "off", where, ": speed_probe is on or off, not '", value, "'");
    c.speedProbe = value == "on";
  } else {
    return false;
  }
  return true;
}

// OpenAI's HTTP API and models loaded by name.
bool applyHttpKey(DaemonConfig& c, const std::string& key, const std::string& value, const std::string& where) {
  if (key == "http") {
    c.http = list(value);
  } else if (key == "http_token_file") {
    c.httpTokenFile = value;
  } else if (key == "http_header_timeout_ms") {
    c.httpHeaderTimeoutMs = number<int64_t>(value, where, 10, 3600000);
  } else if (key == "http_body_timeout_ms") {
    c.httpBodyTimeoutMs = number<int64_t>(value, where, 10, 3600000);
  } else if (key == "http_max_body_bytes") {
    const auto bytes = parseByteSize(value);
    JITLLM_REQUIRE(bytes && *bytes >= 1024, where, ": http_max_body_bytes is a size of at least 1K, such as 8M, not '",
                   value, "'");
    c.httpMaxBodyBytes = *bytes;
  } else if (key == "auto_load") {
    JITLLM_REQUIRE(value == "on" || value == "off", where, ": auto_load is on or off, not '", value, "'");
    c.autoLoad = value == "on";
  } else if (key == "keep_alive") {
    const auto seconds = parseKeepAlive(value);
    JITLLM_REQUIRE(seconds, where, ": keep_alive is a duration such as 300, 90s, 5m or 1h, or -1 for never, not '",
                   value, "'");
    c.keepAliveSeconds = *seconds;
  } else {
    return false;
  }
  return true;
}

// Service c.tiers: scheduling, defaults, targets.
bool applyTierKey(DaemonConfig& c, const std::string& key, const std::string& value, const std::string& where) {
  if (key == "tier_scheduling") {
    JITLLM_REQUIRE(value == "on" || value == "off", where, ": tier_scheduling is on or off, not '", value, "'");
    c.tiers.scheduling = value == "on";
  } else if (key == "tier_default") {
    const auto tier = parseTier(value);
    JITLLM_REQUIRE(tier, where, ": tier_default is interactive, standard or batch, not '", value, "'");
    c.tiers.defaultTier = *tier;
  } else if (key == "tier_users" || key == "tier_groups") {
    auto map = parseTierMap(value);
    JITLLM_REQUIRE(map, where, ": ", key, " is a list of name:tier (tier: interactive, standard or batch), not '",
                   value, "'");
    (key == "tier_users" ? c.tiers.users : c.tiers.groups) = std::move(*map);
  } else if (tierTargetKey(key, c.tiers)) {
    *tierTargetKey(key, c.tiers) = number<double>(value, where, 0.0, 3600000.0);
  } else {
    return false;
  }
  return true;
}

}  // namespace

void DaemonConfig::parse(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = origin + ":" + std::to_string(n);
    const size_t eq = line.find('=');
    JITLLM_REQUIRE(eq != std::string::npos, where, ": expected 'key = value', got '", line, "'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    const bool known = applyServingKey(*this, key, value, where) || applyLimitKey(*this, key, value, where) ||
                       applySchedulerKey(*this, key, value, where) || applyHttpKey(*this, key, value, where) ||
                       applyTierKey(*this, key, value, where);
    JITLLM_REQUIRE(known, where, ": unknown key '", key, "'");
  }
}

void DaemonConfig::loadFile(const std::string& path) {
  // A FIFO or device in the config's place must not stall the signal thread (SIGHUP), nor a
  // directory read as an empty config and reset every setting.
  parse(readRegularFile(path, "the config file"), path);
}

std::optional<double> parseKeepAlive(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double scale = 1;
  std::string digits = text;
  switch (text.back()) {
    case 's':
      digits.pop_back();
      break;
    case 'm':
      scale = 60;
      digits.pop_back();
      break;
    case 'h':
      scale = 3600;
      digits.pop_back();
      break;
    default:
      break;
  }
  double value = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || p != digits.data() + digits.size() || !std::isfinite(value)) return std::nullopt;
  return value < 0 ? -1.0 : value * scale;
}

std::string defaultSocketPath() {
  if (::geteuid() == 0) return "/run/jitllm/jitllmd.sock";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg) return std::string(xdg) + "/jitllm/jitllmd.sock";
  return "/tmp/jitllm-" + std::to_string(::geteuid()) + "/jitllmd.sock";
}

}  // namespace jitllm::server
