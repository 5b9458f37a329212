// jitllmd's settings: built-in defaults, then /etc/jitllm/jitllmd.conf (or --config FILE), then
// the command line. SIGHUP re-reads the file; settings that need a restart (socket, devices) are
// reported and kept.
//
// The file is "key = value" lines; '#' starts a comment; unknown keys and bad values are errors
// naming the line (--check-config prints them and exits 1). Keys are documented in
// systemd/jitllmd.conf.example and docs/operations.md.
//
// Thread-safety: a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/server/service_tier.h"

namespace jitllm::server {

struct DaemonConfig {
  std::string socketPath;              // empty: the default for how we run (system / user)
  std::string devices = "auto";        // every device of the machine (runtime/device_discovery.h), or a list
  int cpuThreads = 0;                  // per CPU device; 0: all cores
  std::vector<std::string> modelDirs;  // where `load` by path may look
  int64_t defaultContext = 4096;
  std::string adminGroup = "jitllm-admin";
  double gracePeriodSeconds = 10;  // SIGTERM: running generations get this long to finish
  std::string logLevel = "info";
  size_t maxSessions = 64;      // per model
  size_t maxQueuedTokens = 64;  // per session, before a slow reader is throttled
  size_t idleSessions = 4;      // per model: finished replies kept for a follow-up (0: none)
  // What one local user may hold, so that no user can stop the daemon serving the others
  // (docs/operations.md, "Limits"). Admins are not limited.
  size_t maxSessionsPerUid = 32;     // per model, running and waiting
  size_t maxConnectionsPerUid = 64;  // open connections
  // Connections: the first message must come within the handshake timeout, a message once begun
  // must end within the message timeout, and a connection with nothing in flight (no reply being
  // generated, no event subscription) that says nothing for the idle timeout is closed (0: never).
  int64_t handshakeTimeoutMs = 10000;
  int64_t messageTimeoutMs = 30000;
  int64_t idleTimeoutMs = 900000;
  // Bytes of requests not yet fully received, over all connections; a request that would pass it
  // fails its connection (OVERLOADED).
  size_t maxInflightBytes = size_t(64) << 20;
  std::vector<std::string> preload;  // models loaded at start ("path" or "name=path")
  // The scheduler (daemon/scheduler, policies/).
  std::string policy = "balanced";     // policies::policyNames()
  int64_t schedulerIntervalMs = 1000;  // 0: no scheduler
  int64_t rescanIntervalMs = 30000;  // devices = auto: look for new or vanished GPUs this often (0: only on udev news)
  std::string telemetryScript;       // scripted telemetry (tests, demos); empty: none
  double thermalHotC = 85, thermalCoolC = 75;
  int64_t thermalCoolForMs = 30000;
  double pressureHigh = 0.92, pressureLow = 0.80;
  bool speedProbe = true;  // measure each kind of device's decode speed once (cached) for placement
  // A model larger than its fastest GPU: "stream" the blocks that do not fit through it each step,
  // or run them on the next device ("cpu").
  std::string spill = "stream";

  // OpenAI-compatible HTTP (daemon/http/, docs/api.md "HTTP"). Addresses are `unix:PATH` or
  // `HOST:PORT`; a TCP address that is not loopback needs a token file (the server refuses to
  // start otherwise), since anyone on the network could reach it.
  std::vector<std::string> http;
  std::string httpTokenFile;                  // bearer tokens, one a line ("TOKEN" or "TOKEN admin"); empty: none
  size_t httpMaxConnections = 512;            // over all HTTP listeners; idle ones give way first
  int64_t httpHeaderTimeoutMs = 10000;        // a request's headers, from its first byte (or connect)
  int64_t httpBodyTimeoutMs = 30000;          // its body, once the headers are in
  size_t httpMaxBodyBytes = size_t(8) << 20;  // 413 past this
  // Models by name: a request naming a model that is not loaded loads `<model_dir>/<name>.gguf`
  // (the first model dir that has it) when auto_load is on; a model loaded that way is unloaded
  // after keep_alive seconds without a request (negative: never; a request may set its own).
  bool autoLoad = true;
  double keepAliveSeconds = 300;

  // Service tiers (service_tier.h): targets (tier_<name>_ttft_ms, tier_<name>_tpot_ms; 0: none),
  // the default tier, and defaults per user and group (tier_users, tier_groups: "name:tier,...").
  TierConfig tiers;

  // Applies the settings in `text`; `origin` names it in errors. Error(FAILED) on a bad line.
  void parse(const std::string& text, const std::string& origin);
  void loadFile(const std::string& path);  // Error(FAILED) if unreadable or invalid
};

// A keep-alive duration: seconds as a number, or with an s, m or h suffix; any negative value
// means "never" (-1). nullopt when it is none of these.
std::optional<double> parseKeepAlive(const std::string& text);

// The socket path when none is configured: /run/jitllm/jitllmd.sock for root (the system
// service), $XDG_RUNTIME_DIR/jitllm/jitllmd.sock for a user.
std::string defaultSocketPath();

}  // namespace jitllm::server
