// The daemon's pieces that need no process: config parsing, chat templates, stop strings, the
// event hub, generation jobs' flow control, access checks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "daemon/server/access_policy.h"
#include "daemon/server/daemon_config.h"
#include "daemon/server/event_hub.h"
#include "daemon/server/generation_job.h"
#include "engine/chat/stop_strings.h"

namespace jitllm::server {
namespace {

TEST(DaemonConfig, ParsesEveryKeyAndIgnoresCommentsAndBlankLines) {
  DaemonConfig c;
  c.parse(R"(# a comment
socket = /tmp/x.sock
devices = cpu:0, cpu:1   # trailing comment
cpu_threads = 2
model_dirs = /a, /b
default_context = 1024
admin_group = wheel

grace_period_seconds = 2.5
log_level = debug
max_sessions = 8
max_queued_tokens = 16
preload = s=/m/s.gguf
policy = thermal
scheduler_interval_ms = 250
telemetry_script = /t.script
thermal_hot_c = 90
thermal_cool_c = 70
thermal_cool_for_ms = 5000
pressure_high = 0.95
pressure_low = 0.7
)",
          "test.conf");
  EXPECT_EQ(c.socketPath, "/tmp/x.sock");
  EXPECT_EQ(c.devices, "cpu:0, cpu:1");
  EXPECT_EQ(c.cpuThreads, 2);
  EXPECT_EQ(c.modelDirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(c.defaultContext, 1024);
  EXPECT_EQ(c.adminGroup, "wheel");
  EXPECT_DOUBLE_EQ(c.gracePeriodSeconds, 2.5);
  EXPECT_EQ(c.logLevel, "debug");
  EXPECT_EQ(c.maxSessions, 8u);
  EXPECT_EQ(c.maxQueuedTokens, 16u);
  EXPECT_EQ(c.preload, (std::vector<std::string>{"s=/m/s.gguf"}));
  EXPECT_EQ(c.policy, "thermal");
  EXPECT_EQ(c.schedulerIntervalMs, 250);
  EXPECT_EQ(c.telemetryScript, "/t.script");
  EXPECT_DOUBLE_EQ(c.thermalHotC, 90);
  EXPECT_DOUBLE_EQ(c.thermalCoolC, 70);
  EXPECT_EQ(c.thermalCoolForMs, 5000);
  EXPECT_DOUBLE_EQ(c.pressureHigh, 0.95);
  EXPECT_DOUBLE_EQ(c.pressureLow, 0.7);
}

TEST(DaemonConfig, BadLinesAreErrorsNamingFileAndLine) {
  auto error = [](const std::string& text) {
    DaemonConfig c;
    try {
      c.parse(text, "bad.conf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error("\n\nfrobnicate = 1\n").find("bad.conf:3: unknown key 'frobnicate'"), std::string::npos);
  EXPECT_NE(error("max_sessions = many").find("bad.conf:1"), std::string::npos);
  EXPECT_NE(error("max_sessions = 0").find("not a number in [1"), std::string::npos);
  EXPECT_NE(error("default_context = 12abc").find("12abc"), std::string::npos);
  EXPECT_NE(error("log_level = loud").find("log_level must be"), std::string::npos);
  EXPECT_NE(error("just words").find("expected 'key = value'"), std::string::npos);
  EXPECT_NE(error("policy = fastest").find("policy must be balanced, thermal, slo, pressure or online"), std::string::npos);
  EXPECT_NE(error("thermal_cool_c = 90").find("thermal_cool_c must be below thermal_hot_c"), std::string::npos);
  EXPECT_NE(error("pressure_low = 0.95").find("pressure_low must be below pressure_high"), std::string::npos);
}

TEST(StopStrings, NeverEmitPartOfAStopStringAndCutAtTheFirstMatch) {
  runtime::StopStringMatcher m({"END", "\n\n"});
  std::string out;
  out += m.feed("Hello E");
  EXPECT_EQ(out, "Hello ") << "'E' may start END: held back";
  out += m.feed("N");
  EXPECT_EQ(out, "Hello ");
  out += m.feed("vy\n");
  EXPECT_EQ(out, "Hello ENvy") << "released once it cannot match; '\\n' held";
  out += m.feed("\nmore");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello ENvy");
  EXPECT_EQ(m.feed("ignored"), "");
  runtime::StopStringMatcher none({});
  EXPECT_EQ(none.feed("abc"), "abc");
  runtime::StopStringMatcher tail({"xyz"});
  EXPECT_EQ(tail.feed("abcx"), "abc");
  EXPECT_EQ(tail.flush(), "x") << "at the end, what was held back is released";
}

TEST(EventHub, SubscribersGetHistoryThenLiveEventsAndOverflowIsReported) {
  EventHub hub;
  hub.emit({0, EventKind::kModel, "model.loaded", "a", "", 0, ""});
  auto box = hub.subscribe(5);
  int wakes = 0;
  box->setWaker([&] { wakes++; });
  EXPECT_EQ(wakes, 1) << "history already waiting wakes at once";
  size_t dropped = 0;
  auto events = box->take(&dropped);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].what, "model.loaded");
  EXPECT_GT(events[0].unixMs, 0);
  box->setWaker([&] { wakes++; });
  hub.emit({0, EventKind::kSession, "session.started", "a", "", 7, ""});
  EXPECT_EQ(wakes, 2);
  for (size_t i = 0; i < EventMailbox::kMaxQueued + 10; i++) hub.emit({0, EventKind::kDaemon, "x", "", "", 0, ""});
  events = box->take(&dropped);
  EXPECT_EQ(events.size(), EventMailbox::kMaxQueued);
  EXPECT_EQ(dropped, 11u);
  box.reset();
  hub.emit({0, EventKind::kDaemon, "after", "", "", 0, ""});  // a dropped subscriber is forgotten
}

TEST(GenerationJob, ThrottlesAtTheQueueLimitAndWakesTheWorkerWhenDrained) {
  GenerationJob job({}, 3);
  int workerWakes = 0, readerWakes = 0;
  job.setWorkerWaker([&] { workerWakes++; });
  job.setWaker([&] { readerWakes++; });
  job.push(1, "a");
  EXPECT_EQ(readerWakes, 1);
  job.push(2, "b");
  EXPECT_FALSE(job.throttled());
  job.push(3, "c");
  EXPECT_TRUE(job.throttled());
  auto b = job.take();
  EXPECT_EQ(b.ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(b.text, "abc");
  EXPECT_FALSE(job.throttled());
  EXPECT_EQ(workerWakes, 1) << "lifting the throttle wakes the worker";
  job.cancel();
  EXPECT_TRUE(job.cancelled());
  EXPECT_EQ(workerWakes, 2);
  job.fail(Error(ErrorKind::kFailed, "cancelled"));
  b = job.take();
  EXPECT_TRUE(b.finished);
  ASSERT_TRUE(b.error.has_value());
}

TEST(AccessPolicy, RootAndTheDaemonsOwnUserAreAdminsOthersAreNot) {
  AccessPolicy p("no-such-group-here");
  EXPECT_TRUE(p.isAdmin(0));
  EXPECT_TRUE(p.isAdmin(::geteuid()));
  EXPECT_FALSE(p.isAdmin(65534));
  try {
    p.requireAdmin(65534, "load");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("permission denied: load needs root or membership in the "
                                         "'no-such-group-here' group (you are uid 65534)"),
              std::string::npos);
  }
}

TEST(AccessPolicy, ReadabilityFollowsModeBitsAlongThePath) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllm-access-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "open");
  std::filesystem::create_directories(dir / "closed");
  std::ofstream(dir / "open" / "m.gguf") << "x";
  std::ofstream(dir / "closed" / "m.gguf") << "x";
  ::chmod(dir.c_str(), 0755);
  ::chmod((dir / "open").c_str(), 0755);
  ::chmod((dir / "open" / "m.gguf").c_str(), 0644);
  ::chmod((dir / "closed").c_str(), 0700);
  ::chmod((dir / "closed" / "m.gguf").c_str(), 0644);
  AccessPolicy p("");
  const uid_t nobody = 65534;
  EXPECT_TRUE(p.canRead((dir / "open" / "m.gguf").string(), nobody));
  EXPECT_FALSE(p.canRead((dir / "closed" / "m.gguf").string(), nobody)) << "the directory is not searchable";
  ::chmod((dir / "open" / "m.gguf").c_str(), 0600);
  if (::geteuid() == 0) {
    EXPECT_FALSE(p.canRead((dir / "open" / "m.gguf").string(), nobody));
  }
  EXPECT_TRUE(p.canRead((dir / "closed" / "m.gguf").string(), 0));
  EXPECT_FALSE(p.canRead((dir / "missing").string(), nobody));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace jitllm::server
