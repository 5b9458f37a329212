// Telemetry from a script, for tests and demos: `jitllmd --telemetry-script FILE`.
//
// The file is lines "AT_MS DEVICE KEY=VALUE ...": from AT_MS milliseconds after the daemon
// started, DEVICE reports these values, until a later line changes them. Keys: `temp` (degrees
// Celsius), `mem_used` and `mem_total` (bytes, with an optional K, M or G suffix, powers of 1024),
// `present` (0: the device is unplugged - its models are re-placed and the sessions that had KV on
// it end with DISCONNECTED; 1: it is back, and the policies may use it again).
// '#' starts a comment. For example:
//
//   0     cuda:0 temp=60
//   5000  cuda:0 temp=88      # hot: layers move away
//   40000 cuda:0 temp=70      # cool for coolForMs: they come back
//   60000 cuda:1 present=0    # unplugged
//
// A malformed line is an Error(FAILED) naming the file and line.
//
// A script loaded from a file is followed: when the file changes, it is read again (a malformed
// version is logged and ignored), so a test or a demo can unplug a device now by appending
// "0 cuda:1 present=0".
//
// Thread-safety: read() from one thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "daemon/scheduler/telemetry_source.h"

namespace jitllm::scheduler {

class ScriptedTelemetry final : public TelemetrySource {
 public:
  static ScriptedTelemetry parse(const std::string& text, const std::string& origin);
  static ScriptedTelemetry load(const std::string& path);

  DeviceTelemetry read(const std::string& deviceId, int64_t nowMs) override;

 private:
  void followFile();

  struct Entry {
    int64_t atMs = 0;
    std::string device;
    std::map<std::string, double> values;
  };
  std::vector<Entry> entries_;  // by time (stable: at equal times, later lines win)
  std::string path_;            // the file followed; "" for a parsed text
  std::string loadedText_;      // what entries_ were parsed from
};

}  // namespace jitllm::scheduler
