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
    if (key == "socket") {
      socketPath = value;
    } else if (key == "devices") {
      JITLLM_REQUIRE(!value.empty(), where, ": devices must not be empty");
      devices = value;
    } else if (key == "cpu_threads") {
      cpuThreads = number<int>(value, where, 0, 1024);
    } else if (key == "model_dirs") {
      modelDirs = list(value);
    } else if (key == "model_dir") {
      JITLLM_REQUIRE(!value.empty(), where, ": model_dir must not be empty");
      modelDirs.push_back(value);
    } else if (key == "default_context") {
      defaultContext = number<int64_t>(value, where, 16, int64_t(1) << 24);
    } else if (key == "admin_group") {
      adminGroup = value;
    } else if (key == "grace_period_seconds") {
      gracePeriodSeconds = number<double>(value, where, 0.0, 3600.0);
    } else if (key == "log_level") {
      JITLLM_REQUIRE(value == "trace" || value == "debug" || value == "info" || value == "warn" || value == "error",
                     where, ": log_level must be trace, debug, info, warn or error");
      logLevel = value;
    } else if (key == "idle_sessions") {
      idleSessions = number<size_t>(value, where, 0, 10000);
    } else if (key == "max_sessions") {
      maxSessions = number<size_t>(value, where, 1, 100000);
    } else if (key == "max_sessions_per_uid") {
      maxSessionsPerUid = number<size_t>(value, where, 1, 100000);
    } else if (key == "max_connections_per_uid") {
      maxConnectionsPerUid = number<size_t>(value, where, 1, 100000);
    } else if (key == "handshake_timeout_ms") {
      handshakeTimeoutMs = number<int64_t>(value, where, 10, 3600000);
    } else if (key == "message_timeout_ms") {
      messageTimeoutMs = number<int64_t>(value, where, 10, 3600000);
    } else if (key == "idle_timeout_ms") {
      idleTimeoutMs = number<int64_t>(value, where, 0, int64_t(7) * 86400000);
    } else if (key == "max_inflight_bytes") {
      const auto bytes = parseByteSize(value);
      JITLLM_REQUIRE(bytes && *bytes >= (size_t(1) << 20), where,
                     ": max_inflight_bytes is a size of at least 1M, such as 64M, not '", value, "'");
      maxInflightBytes = *bytes;
    } else if (key == "max_queued_tokens") {
      maxQueuedTokens = number<size_t>(value, where, 1, 1 << 20);
    } else if (key == "preload") {
      preload = list(value);
    } else if (key == "policy") {
      const std::vector<std::string>& names = policies::policyNames();
      if (std::find(names.begin(), names.end(), value) == names.end()) {
        std::string known;
        for (size_t i = 0; i < names.size(); i++) {
          known += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
        }
        JITLLM_FAIL(kFailed, where, ": policy must be ", known);
      }
      policy = value;
    } else if (key == "rescan_interval_ms") {
      rescanIntervalMs = number<int64_t>(value, where, 0, 86400000);
    } else if (key == "scheduler_interval_ms") {
      schedulerIntervalMs = number<int64_t>(value, where, 0, 3600000);
    } else if (key == "telemetry_script") {
      telemetryScript = value;
    } else if (key == "thermal_hot_c") {
      thermalHotC = number<double>(value, where, 20.0, 150.0);
    } else if (key == "thermal_cool_c") {
      thermalCoolC = number<double>(value, where, 0.0, 150.0);
      JITLLM_REQUIRE(thermalCoolC < thermalHotC, where, ": thermal_cool_c must be below thermal_hot_c (", thermalHotC,
                     ")");
    } else if (key == "thermal_cool_for_ms") {
      thermalCoolForMs = number<int64_t>(value, where, 0, 86400000);
    } else if (key == "pressure_high") {
      pressureHigh = number<double>(value, where, 0.1, 1.0);
    } else if (key == "pressure_low") {
      pressureLow = number<double>(value, where, 0.05, 1.0);
      JITLLM_REQUIRE(pressureLow < pressureHigh, where, ": pressure_low must be below pressure_high (", pressureHigh,
                     ")");
    } else if (key == "spill") {
      JITLLM_REQUIRE(value == "stream" || value == "cpu", where, ": spill is stream or cpu, not '", value, "'");
      spill = value;
    } else if (key == "speed_probe") {
      JITLLM_REQUIRE(value == "on" || value == "off", where, ": speed_probe is on or off, not '", value, "'");
      speedProbe = value == "on";
    } else if (key == "http") {
      http = list(value);
    } else if (key == "http_token_file") {
      httpTokenFile = value;
    } else if (key == "http_max_connections") {
      httpMaxConnections = number<size_t>(value, where, 1, 1000000);
    } else if (key == "http_header_timeout_ms") {
      httpHeaderTimeoutMs = number<int64_t>(value, where, 10, 3600000);
    } else if (key == "http_body_timeout_ms") {
      httpBodyTimeoutMs = number<int64_t>(value, where, 10, 3600000);
    } else if (key == "http_max_body_bytes") {
      const auto bytes = parseByteSize(value);
      JITLLM_REQUIRE(bytes && *bytes >= 1024, where,
                     ": http_max_body_bytes is a size of at least 1K, such as 8M, not '", value, "'");
      httpMaxBodyBytes = *bytes;
    } else if (key == "auto_load") {
      JITLLM_REQUIRE(value == "on" || value == "off", where, ": auto_load is on or off, not '", value, "'");
      autoLoad = value == "on";
    } else if (key == "keep_alive") {
      const auto seconds = parseKeepAlive(value);
      JITLLM_REQUIRE(seconds, where, ": keep_alive is a duration such as 300, 90s, 5m or 1h, or -1 for never, not '",
                     value, "'");
      keepAliveSeconds = *seconds;
    } else if (key == "tier_scheduling") {
      JITLLM_REQUIRE(value == "on" || value == "off", where, ": tier_scheduling is on or off, not '", value, "'");
      tiers.scheduling = value == "on";
    } else if (key == "tier_default") {
      const auto tier = parseTier(value);
      JITLLM_REQUIRE(tier, where, ": tier_default is interactive, standard or batch, not '", value, "'");
      tiers.defaultTier = *tier;
    } else if (key == "tier_users" || key == "tier_groups") {
      auto map = parseTierMap(value);
      JITLLM_REQUIRE(map, where, ": ", key, " is a list of name:tier (tier: interactive, standard or batch), not '",
                     value, "'");
      (key == "tier_users" ? tiers.users : tiers.groups) = std::move(*map);
    } else if (tierTargetKey(key, tiers)) {
      *tierTargetKey(key, tiers) = number<double>(value, where, 0.0, 3600000.0);
    } else {
      JITLLM_FAIL(kFailed, where, ": unknown key '", key, "'");
    }
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
