// jitllm-scheduler-bench: how long the scheduler takes from a trigger to the placement it leads to,
// with a reply streaming, through the daemon's own code (DaemonCore, Scheduler, ModelHost) on a
// virtual clock - no RPC, no sleeps in the measurement.
//
//   heat-up  a scripted reading puts cpu:0 at 95 °C: the tick plans, the model's units migrate to
//            cpu:1 live; measured until the migration has committed and ps shows the new placement.
//   vanish   cpu:1, holding half the blocks, goes away: the tick returns once the model is
//            re-placed on cpu:0 (its session ends with DISCONNECTED).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/scheduler/scripted_telemetry.h"
#include "daemon/server/daemon_core.h"
#include "tools/command_line.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-scheduler-bench MODEL.gguf [--contexts 512,2048] [-r REPS]
  --contexts L  tokens in the streaming session's KV when the trigger comes (default 512,2048)
  -r REPS       repetitions per context (default 3)
  -t THREADS    worker threads of each of the two CPU devices (default 1)
  -v            log the daemon's events (with their times)
)";

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// A session that has `context` tokens in its KV and keeps generating while a reader drains it.
struct StreamingSession {
  std::shared_ptr<server::GenerationJob> job;
  std::thread reader;
  std::atomic<bool> stop{false};

  StreamingSession(server::ModelHost& host, int64_t context) {
    server::GenerationRequest r;
    for (int64_t i = 0; i < context; i++) r.prompt.push_back(int32_t(1 + (i * 7919) % 1000));
    r.maxTokens = 100000;
    r.sampling.temperature = 0;
    r.contextLimit = context + 256;
    job = std::make_shared<server::GenerationJob>(r, 4);
    host.submit(job);
    // Wait for the prompt to be in the KV (the first token), then keep reading.
    for (bool first = false; !first;) {
      auto b = job->take();
      first = !b.ids.empty() || b.finished;
      if (b.finished && b.error) throw *b.error;
      if (!first) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    reader = std::thread([this] {
      while (!stop) {
        if (job->take().finished) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~StreamingSession() {
    stop = true;
    job->cancel();
    reader.join();
  }
};

int cpuThreads = 1;

std::unique_ptr<server::DaemonCore> makeCore(const std::string& path) {
  server::DaemonConfig config;
  config.devices = "cpu:0,cpu:1";
  config.cpuThreads = cpuThreads;
  config.modelDirs = {std::filesystem::path(path).parent_path().string()};
  config.logLevel = spdlog::get_level() <= spdlog::level::info ? "info" : "warn";
  return std::make_unique<server::DaemonCore>(config);
}

std::shared_ptr<server::ModelHost> load(server::DaemonCore& core, const std::string& path, const std::string& devices,
                                        int64_t context) {
  server::LoadRequest r;
  r.path = path;
  r.name = "bench";
  for (const DeviceRequest& d : parseDeviceList(devices)) r.devices.push_back(d.id);
  r.contextSize = context + 256;
  return core.load(r, nullptr);
}

// Until ps would show every unit on `device` (published after the step that follows the commit).
void waitForPlacement(const server::ModelHost& host, const std::string& device) {
  const auto deadline = Clock::now() + std::chrono::minutes(2);
  for (;;) {
    const auto snap = host.snapshot();
    bool there = !snap.migrating;
    for (const auto& u : snap.units) there = there && u.device == device;
    if (there) return;
    JITLLM_REQUIRE(Clock::now() < deadline, "the units did not reach ", device);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
  std::string path;
  std::vector<int64_t> contexts = {512, 2048};
  int reps = 3;
  bool verbose = false;
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "--contexts") {
      contexts.clear();
      std::stringstream in(cl.value(a));
      for (std::string n; std::getline(in, n, ',');) contexts.push_back(std::stoll(n));
    } else if (a == "-r") {
      reps = cl.number<int>(a);
    } else if (a == "-t") {
      cpuThreads = cl.number<int>(a);
    } else if (a == "-v") {
      verbose = true;
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      throw tools::UsageError("unknown option " + a);
    } else {
      path = std::filesystem::absolute(a).string();
    }
  }
  if (path.empty()) throw tools::UsageError("no model given");
  spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::err);
  std::printf("%-8s %8s %12s %12s\n", "scenario", "context", "median ms", "max ms");
  for (int64_t context : contexts) {
    std::vector<double> heat, vanish;
    for (int r = 0; r < reps; r++) {
      {
        auto core = makeCore(path);
        auto host = load(*core, path, "cpu:0", context);
        scheduler::Scheduler s(*core,
                               std::make_unique<scheduler::ScriptedTelemetry>(scheduler::ScriptedTelemetry::parse(
                                   "0 cpu:0 temp=60\n1000 cpu:0 temp=95\n", "bench")),
                               policies::PolicyConfig{}, "thermal");
        s.tick(0);
        StreamingSession session(*host, context);
        const auto t0 = Clock::now();
        JITLLM_REQUIRE(s.tick(1000).size() == 1, "the heat-up did not lead to a migration");
        waitForPlacement(*host, "cpu:1");
        heat.push_back(msSince(t0));
      }
      {
        auto core = makeCore(path);
        auto host = load(*core, path, "cpu:0,cpu:1", context);
        scheduler::Scheduler s(*core,
                               std::make_unique<scheduler::ScriptedTelemetry>(
                                   scheduler::ScriptedTelemetry::parse("1000 cpu:1 present=0\n", "bench")),
                               policies::PolicyConfig{}, "balanced");
        s.tick(0);
        StreamingSession session(*host, context);
        const auto t0 = Clock::now();
        s.tick(1000);
        vanish.push_back(msSince(t0));
        for (const auto& u : host->snapshot().units) JITLLM_REQUIRE(u.device == "cpu:0", u.name, " was not re-placed");
      }
    }
    for (auto* v : {&heat, &vanish}) std::sort(v->begin(), v->end());
    std::printf("%-8s %8lld %12.2f %12.2f\n", "heat-up", (long long)context, heat[heat.size() / 2], heat.back());
    std::printf("%-8s %8lld %12.2f %12.2f\n", "vanish", (long long)context, vanish[vanish.size() / 2], vanish.back());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-scheduler-bench", kUsage, run, argc, argv); }
