// Drives a real DaemonCore in-process for the scheduler's and the daemon's scenario tests: load
// stories260K on named devices, start replies (greedy, throttled by a small queue so they stay
// mid-reply until the test reads), read them, and look at placement and events.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "daemon/scheduler/scripted_telemetry.h"
#include "daemon/server/daemon_core.h"
#include "tests/daemon/bounded_wait.h"

namespace jitllm::scheduler {

inline const std::string kModels = std::string(JITLLM_SHARED_DIR) + "/models";
inline const std::string kStories = kModels + "/stories260K.gguf";

struct Outcome {
  std::vector<int32_t> ids;
  std::optional<Error> error;
  server::GenerationStats stats;  // when it finished without error
};

inline std::shared_ptr<server::GenerationJob> start(server::ModelHost& host, uint32_t maxTokens,
                                                    std::vector<int32_t> prompt = {}, uint32_t uid = 0) {
  server::GenerationRequest r;
  r.prompt = prompt.empty() ? host.model().tokenizer().encode("Once upon a time, there was a", true, false) : prompt;
  r.ownerUid = uid;
  r.maxTokens = maxTokens;
  r.sampling.temperature = 0;  // greedy: the tokens are a function of the KV and the weights
  // A small queue throttles the session until the test reads: it stays mid-reply while the test
  // changes the devices under it.
  auto job = std::make_shared<server::GenerationJob>(r, 4);
  host.submit(job);
  return job;
}

// Moves what `job` has produced into `out`; true once it has finished (error and stats then set).
inline bool takeInto(server::GenerationJob& job, Outcome& out) {
  auto b = job.take();
  out.ids.insert(out.ids.end(), b.ids.begin(), b.ids.end());
  if (b.finished) {
    out.error = b.error;
    out.stats = b.stats;
  }
  return b.finished;
}

// Reads until `job` has produced at least `atLeast` tokens, or has finished.
inline void readSome(server::GenerationJob& job, Outcome& out, size_t atLeast) {
  jitllm::testing::waitUntil([&] { return takeInto(job, out) || out.ids.size() >= atLeast; }, std::chrono::seconds(60),
                             std::chrono::milliseconds(1));
}

inline Outcome finish(server::GenerationJob& job, Outcome out = {}) {
  if (!jitllm::testing::waitUntil([&] { return takeInto(job, out); }, std::chrono::seconds(120),
                                  std::chrono::milliseconds(1))) {
    ADD_FAILURE() << "the generation did not finish";
  }
  return out;
}

inline std::vector<std::string> placement(const server::ModelHost& host) {
  std::vector<std::string> where;
  for (const auto& u : host.snapshot().units) where.push_back(u.device);
  return where;
}

inline std::vector<std::string> settled(const server::ModelHost& host) {
  jitllm::testing::waitUntil([&] { return !host.snapshot().migrating; }, std::chrono::seconds(60),
                             std::chrono::milliseconds(5));
  EXPECT_FALSE(host.snapshot().migrating) << host.name() << " is still migrating";
  return placement(host);
}

inline std::string eventLog(server::DaemonCore& core) {
  size_t dropped = 0;
  std::string log;
  for (const auto& e : core.events().subscribe(server::EventHub::kHistory)->take(&dropped)) {
    log += e.what + " [" + e.model + "] " + e.message + "\n";
  }
  return log;
}

inline std::unique_ptr<server::DaemonCore> makeCore(const std::string& devices, size_t idleSessions = 4) {
  server::DaemonConfig config;
  config.devices = devices;
  config.idleSessions = idleSessions;
  config.cpuThreads = 1;
  config.modelDirs = {kModels};
  return std::make_unique<server::DaemonCore>(config);
}

// A core with `devices`, or null when one of them cannot be opened here (no Vulkan device on the
// machine), with `why` saying why: the caller skips visibly.
inline std::unique_ptr<server::DaemonCore> tryMakeCore(const std::string& devices, std::string& why) {
  try {
    return makeCore(devices);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

inline std::shared_ptr<server::ModelHost> load(server::DaemonCore& core, const std::string& name,
                                               const std::string& devices) {
  server::LoadRequest r;
  r.path = kStories;
  r.name = name;
  if (!devices.empty()) {
    for (const DeviceRequest& d : parseDeviceList(devices)) r.devices.push_back(d.id);
  }
  return core.load(r, nullptr);
}

inline std::unique_ptr<ScriptedTelemetry> script(const std::string& text) {
  return std::make_unique<ScriptedTelemetry>(ScriptedTelemetry::parse(text, "test-script"));
}

inline bool everyUnitOn(const std::vector<std::string>& where, const std::string& device) {
  return !where.empty() && std::all_of(where.begin(), where.end(), [&](const auto& d) { return d == device; });
}

}  // namespace jitllm::scheduler
