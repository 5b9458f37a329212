// jitllmd: the daemon. Owns the machine's devices and resident models and serves them over Cap'n
// Proto RPC on a Unix socket. Runs in the foreground (systemd Type=notify); see docs/operations.md.
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "base/error.h"
#include "base/regular_file.h"
#include "daemon/http/http_listener.h"
#include "daemon/scheduler/nvml_telemetry.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/scheduler/scripted_telemetry.h"
#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"
#include "daemon/server/device_watcher.h"
#include "daemon/server/listen_socket.h"
#include "daemon/server/logging.h"
#include "daemon/server/loop_bridge.h"
#include "daemon/server/rpc_listener.h"
#include "jitllm/jitllm.capnp.h"

using namespace jitllm;
using namespace jitllm::server;

namespace {

constexpr const char* kUsage = R"(usage: jitllmd [options]
  --socket PATH          listen here (default: /run/jitllm/jitllmd.sock as root,
                         $XDG_RUNTIME_DIR/jitllm/jitllmd.sock otherwise); ignored when systemd
                         passes a socket (LISTEN_FDS)
  --config FILE          settings file (default: /etc/jitllm/jitllmd.conf as root,
                         ~/.config/jitllm/jitllmd.conf otherwise, when present)
  --devices SPEC         devices to own: auto (default: every device, and GPUs plugged in
                         later), or a list such as cpu:0 or cpu:0,cuda:0
  --threads N            threads per CPU device (default: all cores)
  --model-dir DIR        a directory `load` may read by path, and where HTTP requests find
                         models by name (NAME.gguf) (repeatable)
  --http ADDR            serve OpenAI's HTTP API on unix:PATH or HOST:PORT (repeatable;
                         a non-loopback HOST needs --http-token-file)
  --http-token-file F    bearer tokens for HTTP over TCP ("TOKEN" or "TOKEN admin" a line)
  --preload FILE         load this model at start (repeatable; NAME=FILE names it)
  --default-context N    session context limit when a request names none (default 4096)
  --grace-period S       on SIGTERM, let running generations finish this long (default 10)
  --admin-group NAME     group whose members may load/unload (default jitllm-admin)
  --log-level LEVEL      trace, debug, info, warn, error (default info)
  --policy NAME          scheduling policy: balanced (default), thermal, pressure, online
  --telemetry-script F   device telemetry from a script (tests, demos; docs/operations.md)
  --scheduler-interval-ms N  how often the scheduler looks (default 1000; 0: never)
  --check-config         validate the settings, print them, exit 0 (or 1 with the error)
  --version, --help
)";

struct Arguments {
  DaemonConfig config;
  bool checkOnly = false;
};

std::string defaultConfigPath() {
  if (::geteuid() == 0) return "/etc/jitllm/jitllmd.conf";
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && *xdg) return std::string(xdg) + "/jitllm/jitllmd.conf";
  if (home && *home) return std::string(home) + "/.config/jitllm/jitllmd.conf";
  return {};
}

// The config file first, then the command line over it.
std::optional<Arguments> parseArguments(int argc, char** argv, std::string* configPath) {
  std::vector<std::pair<std::string, std::string>> overrides;
  Arguments a;
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) JITLLM_FAIL(kFailed, arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return std::nullopt;
    } else if (arg == "--version") {
      std::cout << "jitllmd " << JITLLM_VERSION_STRING << " (protocol " << jitllm::rpc::PROTOCOL_VERSION << "; "
                << JITLLM_BUILD_INFO << ")\n";
      return std::nullopt;
    } else if (arg == "--config") {
      *configPath = value();
    } else if (arg == "--check-config") {
      a.checkOnly = true;
    } else if (arg == "--socket") {
      overrides.emplace_back("socket", value());
    } else if (arg == "--devices") {
      overrides.emplace_back("devices", value());
    } else if (arg == "--threads") {
      overrides.emplace_back("cpu_threads", value());
    } else if (arg == "--model-dir") {
      overrides.emplace_back("+model_dirs", value());
    } else if (arg == "--http") {
      overrides.emplace_back("+http", value());
    } else if (arg == "--http-token-file") {
      overrides.emplace_back("http_token_file", value());
    } else if (arg == "--preload") {
      overrides.emplace_back("+preload", value());
    } else if (arg == "--default-context") {
      overrides.emplace_back("default_context", value());
    } else if (arg == "--grace-period") {
      overrides.emplace_back("grace_period_seconds", value());
    } else if (arg == "--admin-group") {
      overrides.emplace_back("admin_group", value());
    } else if (arg == "--log-level") {
      overrides.emplace_back("log_level", value());
    } else if (arg == "--policy") {
      overrides.emplace_back("policy", value());
    } else if (arg == "--telemetry-script") {
      overrides.emplace_back("telemetry_script", value());
    } else if (arg == "--scheduler-interval-ms") {
      overrides.emplace_back("scheduler_interval_ms", value());
    } else {
      JITLLM_FAIL(kFailed, "unknown option '", arg, "' (see --help)");
    }
  }
  const bool explicitConfig = !configPath->empty();
  if (!explicitConfig) *configPath = defaultConfigPath();
  if (!configPath->empty() && (explicitConfig || std::filesystem::exists(*configPath))) {
    a.config.loadFile(*configPath);
  } else {
    configPath->clear();
  }
  for (const auto& [key, v] : overrides) {
    if (key == "+model_dirs") {
      a.config.modelDirs.push_back(v);
    } else if (key == "+http") {
      a.config.http.push_back(v);
    } else if (key == "+preload") {
      a.config.preload.push_back(v);
    } else {
      a.config.parse(key + " = " + v, "command line");
    }
  }
  return a;
}

void notify(const std::string& state) { sd_notify(0, state.c_str()); }

// Every connection holds a descriptor: use all the hard limit allows (systemd's default soft limit
// is 1024). When they run out anyway, the listener pauses and goes on (rpc_listener.h).
void raiseDescriptorLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    spdlog::debug("descriptors: soft limit raised from {} to {}", before, limit.rlim_cur);
  }
}

// SIGHUP: the config file read again; what can change live does (DaemonCore::reload).
void reloadConfig(DaemonCore& core, const std::string& configPath) {
  notify("RELOADING=1");
  try {
    DaemonConfig fresh;
    if (!configPath.empty()) fresh.loadFile(configPath);
    for (const auto& key : core.reload(fresh)) spdlog::warn("config: '{}' changes only on restart", key);
    core.events().emit({0, EventKind::kDaemon, "daemon.reloaded", "", "", 0, configPath});
  } catch (const Error& e) {
    spdlog::error("config reload failed, keeping the old settings: {}", e.what());
  }
  notify("READY=1");
}

// The RPC socket: systemd's, or one of our own at the configured (or default) path.
ListenSocket rpcSocket(DaemonConfig& config, std::optional<ListenSocket>& activated) {
  if (activated) return std::move(*activated);
  if (config.socketPath.empty()) config.socketPath = defaultSocketPath();
  // System service: the socket's group (jitllm) may connect. A user's daemon: that user only.
  return ListenSocket::create(config.socketPath, ::geteuid() == 0 ? 0660 : 0600);
}

// The config's preloads, in order; one that fails is logged and skipped.
void preloadModels(DaemonCore& core, const DaemonConfig& config) {
  for (const auto& item : config.preload) {
    LoadRequest r;
    const size_t eq = item.find('=');
    r.path = eq == std::string::npos ? item : item.substr(eq + 1);
    if (eq != std::string::npos) r.name = item.substr(0, eq);
    try {
      // Preloads are the operator's own choice: any path, not only model_dirs.
      const int file = openRegularFile(r.path, "preload");
      const auto closeFile = kj::defer([file] { ::close(file); });
      r.fd = file;
      core.load(r, nullptr);
    } catch (const Error& e) {
      spdlog::error("preload failed: {}", e.what());
    }
  }
}

// A script (tests, demos) replaces the real sources; otherwise NVML where there is one (null: none).
std::unique_ptr<jitllm::scheduler::TelemetrySource> openTelemetry(const DaemonConfig& config, DaemonCore& core) {
  if (!config.telemetryScript.empty()) {
    return std::make_unique<jitllm::scheduler::ScriptedTelemetry>(
        jitllm::scheduler::ScriptedTelemetry::load(config.telemetryScript));
  }
  std::map<std::string, std::string> uuids;
  for (jitllm::Device* d : core.devices()) uuids[d->info().id.str()] = d->info().uuid;
  std::string why;
  auto nvml = jitllm::scheduler::NvmlTelemetry::open(uuids, &why);
  if (!nvml) {
    spdlog::info("telemetry: no NVML ({}); the devices' own memory accounting only", why);
    return nullptr;
  }
  spdlog::info("telemetry: NVML for {} device(s)", nvml->matched());
  return nvml;
}

jitllm::policies::PolicyConfig policyConfigOf(const DaemonConfig& config) {
  jitllm::policies::PolicyConfig p;
  p.hotC = config.thermalHotC;
  p.coolC = config.thermalCoolC;
  p.coolForMs = config.thermalCoolForMs;
  p.pressureHigh = config.pressureHigh;
  p.pressureLow = config.pressureLow;
  return p;
}

// What runs on the daemon loop every so often: systemd's watchdog ping (at half the interval it
// asked for), the STATUS= line every 5 s, and the scheduler's tick. stop() ends them all.
class PeriodicWork final {
 public:
  PeriodicWork(boost::asio::io_context& loop, DaemonCore& core)
      : core_(core), watchdog_(loop), status_(loop), tick_(loop) {}

  void start(jitllm::scheduler::Scheduler& scheduler, int64_t intervalMs) {
    if (sd_watchdog_enabled(0, &watchdogUsec_) > 0 && watchdogUsec_ > 0) ping();
    status();
    if (intervalMs <= 0) return;
    // One look before serving: devices the telemetry says are absent are offline from the start.
    scheduler.tick(0);
    core_.setPolicyControl(&scheduler);
    tick(scheduler, intervalMs);
  }
  void stop() {
    stopped_ = true;
    watchdog_.cancel();
    status_.cancel();
    tick_.cancel();
  }

 private:
  void ping() {
    notify("WATCHDOG=1");
    watchdog_.expires_after(std::chrono::microseconds(watchdogUsec_ / 2));
    watchdog_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !stopped_) ping();
    });
  }
  void status() {
    status_.expires_after(std::chrono::seconds(5));
    status_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped_) return;
      notify("STATUS=" + core_.statusLine());
      status();
    });
  }
  void tick(jitllm::scheduler::Scheduler& scheduler, int64_t intervalMs) {
    tick_.expires_after(std::chrono::milliseconds(intervalMs));
    tick_.async_wait([this, &scheduler, intervalMs](const boost::system::error_code& ec) {
      if (ec || stopped_) return;
      const int64_t now =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count();
      try {
        scheduler.tick(now);
      } catch (const std::exception& e) {
        spdlog::error("scheduler: {}", e.what());
      }
      tick(scheduler, intervalMs);
    });
  }

  DaemonCore& core_;
  boost::asio::steady_timer watchdog_, status_, tick_;
  uint64_t watchdogUsec_ = 0;
  bool stopped_ = false;  // daemon loop only
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Replies that finished in the grace period are still being sent (and their last chunks
// answered): the RPC loop goes on until they are out, for at most kReplyFlushTime.
void flushReplies(DaemonCore& core, kj::AsyncIoContext& io) {
  constexpr auto kReplyFlushTime = std::chrono::seconds(5);
  const auto flushDeadline = std::chrono::steady_clock::now() + kReplyFlushTime;
  while (core.activeReplies() > 0 && std::chrono::steady_clock::now() < flushDeadline) {
    io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
  }
  for (int i = 0; i < 10; i++) io.waitScope.poll();
}

int runDaemon(DaemonConfig config, const std::string& configPath) {
  setupLogging(config.logLevel);
  ::signal(SIGPIPE, SIG_IGN);
  raiseDescriptorLimit();
  ActivatedSockets activated = ListenSocket::fromSystemd();
  ListenSocket socket = rpcSocket(config, activated.rpc);
  spdlog::info("jitllmd {} listening on {}{}", JITLLM_VERSION_STRING,
               socket.path().empty() ? "(socket from systemd)" : socket.path(),
               socket.fromSystemdActivation() ? " (from systemd)" : "");

  DaemonCore core(config);
  // Hot-plug: with `devices = auto`, GPUs that arrive or vanish later (udev's news, and a periodic look).
  std::unique_ptr<DeviceWatcher> watcher;
  if (core.rescans()) {
    DeviceWatcherOptions o;
    o.interval = std::chrono::milliseconds(config.rescanIntervalMs);
    watcher = std::make_unique<DeviceWatcher>([&core] { core.rescanDevices(); }, o);
    spdlog::info("devices: re-enumerated every {} ms{}", config.rescanIntervalMs,
                 watcher->monitoring() ? " and on udev's drm/nvidia news" : " (" + watcher->problem() + ")");
  }
  auto io = kj::setupAsyncIo();
  BackgroundThreads background;
  auto listener =
      kj::heap<RpcListener>(core, background, *io.lowLevelProvider, io.provider->getTimer(), socket.release());
  // OpenAI's HTTP API on the same loop (daemon/http/), when configured or socket-activated.
  kj::Own<http::HttpListener> httpListener;
  if (!config.http.empty() || !activated.http.empty()) {
    httpListener = kj::heap<http::HttpListener>(core, background, *io.provider, *io.lowLevelProvider, io.unixEventPort,
                                                io.provider->getTimer());
    for (auto& passed : activated.http) httpListener->adopt(std::move(passed));
    for (const auto& address : config.http) httpListener->listen(address).wait(io.waitScope);
  }
  // Preloads run on a loader thread while this loop serves: meanwhile /health answers 503
  // "starting" (and RPC answers with what is loaded so far); READY=1 comes after them.
  if (!config.preload.empty()) {
    background
        .run(std::function<bool()>([&] {
          preloadModels(core, config);
          return true;
        }))
        .wait(io.waitScope);
  }

  boost::asio::io_context daemonLoop;
  auto work = boost::asio::make_work_guard(daemonLoop);
  LoopBridge bridge(kj::getCurrentThreadExecutor(), daemonLoop);
  auto shutdown = kj::newPromiseAndCrossThreadFulfiller<void>();
  const kj::CrossThreadPromiseFulfiller<void>& shutdownFulfiller = *shutdown.fulfiller;
  PeriodicWork periodic(daemonLoop, core);

  boost::asio::signal_set signals(daemonLoop, SIGTERM, SIGINT, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> onSignal;
  bool stopping = false;
  onSignal = [&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    if (signo == SIGHUP) {
      reloadConfig(core, configPath);
      signals.async_wait(onSignal);
      return;
    }
    if (stopping) return;
    stopping = true;
    periodic.stop();
    notify("STOPPING=1");
    watcher.reset();  // no device comes or goes while the models drain
    core.events().emit({0, EventKind::kDaemon, "daemon.stopping", "", "", 0, strsignal(signo)});
    bridge.toRpc([&] {
      listener->stopAccepting();
      if (httpListener) httpListener->stopAccepting();
    });
    const auto grace = std::chrono::milliseconds(int64_t(core.config().gracePeriodSeconds * 1000));
    const size_t cancelled = core.drain(grace);
    spdlog::info("drained: {} generation(s) cancelled after the {} s grace period", cancelled,
                 core.config().gracePeriodSeconds);
    shutdownFulfiller.fulfill();
    work.reset();
  };
  signals.async_wait(onSignal);

  // The scheduler ticks on the daemon loop: telemetry in, the policy's plan out (daemon/scheduler).
  jitllm::scheduler::Scheduler scheduler(core, openTelemetry(config, core), policyConfigOf(config), config.policy);
  periodic.start(scheduler, config.schedulerIntervalMs);

  std::thread daemonThread([&] { daemonLoop.run(); });
  if (httpListener) httpListener->setReady();
  notify("READY=1\nSTATUS=" + core.statusLine());
  core.events().emit({0, EventKind::kDaemon, "daemon.ready", "", "", 0, JITLLM_VERSION_STRING});

  shutdown.promise.wait(io.waitScope);
  flushReplies(core, io);  // (the signal that stopped the daemon stopped the periodic work too)
  core.setPolicyControl(nullptr);
  signals.cancel();
  daemonLoop.stop();
  daemonThread.join();
  background.joinAll();
  httpListener = nullptr;
  listener = nullptr;
  spdlog::info("jitllmd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string configPath;
  std::optional<Arguments> args;
  try {
    args = parseArguments(argc, argv, &configPath);
    if (!args) return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "jitllmd: %s\n", e.what());
    return 2;
  }
  if (args->checkOnly) {
    const auto& c = args->config;
    try {
      for (const auto& h : c.http) http::HttpAddress::parse(h);
    } catch (const Error& e) {
      std::fprintf(stderr, "jitllmd: %s\n", e.what());
      return 1;
    }
    std::printf("config: %s\nsocket: %s\ndevices: %s\nmodel_dirs:", configPath.empty() ? "(none)" : configPath.c_str(),
                (c.socketPath.empty() ? defaultSocketPath() : c.socketPath).c_str(), c.devices.c_str());
    for (const auto& d : c.modelDirs) std::printf(" %s", d.c_str());
    std::printf(
        "\ndefault_context: %lld\nadmin_group: %s\ngrace_period_seconds: %g\nmax_sessions: %zu\n"
        "max_queued_tokens: %zu\nlog_level: %s\npolicy: %s\nscheduler_interval_ms: %lld\ntelemetry_script: %s\n"
        "thermal_hot_c: %g\nthermal_cool_c: %g\nthermal_cool_for_ms: %lld\npressure_high: %g\npressure_low: %g\n"
        "speed_probe: %s\nspill: %s\nmax_sessions_per_uid: %zu\nmax_connections_per_uid: %zu\n"
        "handshake_timeout_ms: %lld\nmessage_timeout_ms: %lld\nidle_timeout_ms: %lld\nmax_inflight_bytes: %zu\n",
        (long long)c.defaultContext, c.adminGroup.c_str(), c.gracePeriodSeconds, c.maxSessions, c.maxQueuedTokens,
        c.logLevel.c_str(), c.policy.c_str(), (long long)c.schedulerIntervalMs,
        c.telemetryScript.empty() ? "(none)" : c.telemetryScript.c_str(), c.thermalHotC, c.thermalCoolC,
        (long long)c.thermalCoolForMs, c.pressureHigh, c.pressureLow, c.speedProbe ? "on" : "off", c.spill.c_str(),
        c.maxSessionsPerUid, c.maxConnectionsPerUid, (long long)c.handshakeTimeoutMs, (long long)c.messageTimeoutMs,
        (long long)c.idleTimeoutMs, c.maxInflightBytes);
    std::printf("http:");
    for (const auto& h : c.http) std::printf(" %s", h.c_str());
    std::printf(
        "\nhttp_token_file: %s\nhttp_max_connections: %zu\nhttp_header_timeout_ms: %lld\nhttp_body_timeout_ms: %lld\n"
        "http_max_body_bytes: %zu\nauto_load: %s\nkeep_alive: %g\nok\n",
        c.httpTokenFile.empty() ? "(none)" : c.httpTokenFile.c_str(), c.httpMaxConnections,
        (long long)c.httpHeaderTimeoutMs, (long long)c.httpBodyTimeoutMs, c.httpMaxBodyBytes, c.autoLoad ? "on" : "off",
        c.keepAliveSeconds);
    return 0;
  }
  try {
    return runDaemon(args->config, configPath);
  } catch (const Error& e) {
    spdlog::critical("{}", e.what());
    std::fprintf(stderr, "jitllmd: %s\n", e.what());
    return 1;
  } catch (const kj::Exception& e) {
    std::fprintf(stderr, "jitllmd: %s\n", e.getDescription().cStr());
    return 1;
  }
}
