// jitllmd's HTTP API against hostile and numerous clients (issue 29's acceptance): malformed and
// mistyped JSON, a 100 MB body, a client sending one byte a second, 1,000 idle connections, a
// client vanishing mid-stream, and 32 concurrent streaming clients. After each, the daemon must
// still answer a well-behaved client. The happy paths with OpenAI's own client are
// tests/http/openai_acceptance.sh.
//
// The client side here writes requests by hand on purpose: hostile clients are what no HTTP
// library would send.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>

#include <atomic>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/daemon/daemon_harness.h"
#include "tests/daemon/http_client.h"
#include "tests/scoped_test_state.h"

namespace jitllm::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// The text of an event stream's `data:` chunks (chunked transfer framing is skipped by looking for
// the data lines only; every event is small enough to stay in one chunk).
std::string streamedText(const std::string& body, bool* done) {
  std::string text;
  *done = false;
  for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at + 1)) {
    const std::string line = body.substr(at + 6, body.find('\n', at) - at - 6);
    if (line == "[DONE]") {
      *done = true;
      continue;
    }
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("choices") && !j["choices"].empty()) text += j["choices"][0].value("text", "");
  }
  return text;
}

const std::string kModel = "stories260K";
const std::string kGreedy = R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":40,"temperature":0)";

class HttpDaemon : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto config =
        std::filesystem::temp_directory_path() / ("jitllmd-http-" + std::to_string(::getpid()) + ".conf");
    std::ofstream(config) << "idle_sessions = 0\nhttp_header_timeout_ms = 1500\nhttp_body_timeout_ms = 1500\n"
                             "http_max_body_bytes = 1M\nhttp_max_connections = 200\nscheduler_interval_ms = 0\n";
    httpSocket_ =
        (std::filesystem::temp_directory_path() / ("jitllmd-http-" + std::to_string(::getpid()) + ".sock")).string();
    daemon_ = new DaemonProcess({"--config", config.string(), "--http", "unix:" + httpSocket_, "--preload",
                                 kModel + "=" + sharedPath("models/stories260K.gguf")});
    std::filesystem::remove(config);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(daemon_->ready()) << daemon_->log();
    if (reference_.empty()) {
      const Reply r = call(httpSocket_, "POST", "/v1/completions", kGreedy + "}");
      ASSERT_EQ(r.status, 200) << r.body;
      reference_ = json::parse(r.body)["choices"][0]["text"].get<std::string>();
      ASSERT_FALSE(reference_.empty());
    }
  }
  // A well-behaved client still gets the reply it got before.
  void expectStillServing() {
    const Reply r = call(httpSocket_, "POST", "/v1/completions", kGreedy + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], reference_);
  }
  static json ps() { return json::parse(call(httpSocket_, "GET", "/jitllm/v1/ps").body, nullptr, false); }
  static size_t sessions() {
    const json p = ps();
    size_t n = 0;
    for (const auto& m : p["models"]) n += m["sessions"].size();
    return n;
  }
  // The one sample of `name` (with the model label) in /metrics; -1 when there is none.
  static double metric(const std::string& name) {
    const std::string body = call(httpSocket_, "GET", "/metrics").body;
    const std::string key = "jitllm:" + name + "{model=\"" + kModel + "\"} ";
    const size_t at = body.find(key);
    return at == std::string::npos ? -1 : std::stod(body.substr(at + key.size()));
  }

  static DaemonProcess* daemon_;
  static std::string httpSocket_;
  static std::string reference_;
};
DaemonProcess* HttpDaemon::daemon_ = nullptr;
std::string HttpDaemon::httpSocket_;
std::string HttpDaemon::reference_;

TEST_F(HttpDaemon, MalformedJsonAndWrongTypesGetOpenAiErrorObjectsNamingTheParameter) {
  Reply r = call(httpSocket_, "POST", "/v1/chat/completions", "{\"model\": \"stories260K\", \"messages\": [");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error") << r.body;
  r = call(httpSocket_, "POST", "/v1/chat/completions",
           R"({"model":"stories260K","messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "max_tokens") << r.body;
  r = call(httpSocket_, "POST", "/v1/chat/completions", R"({"model":"stories260K","messages":"hi"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "messages") << r.body;
  r = call(httpSocket_, "POST", "/v1/completions", R"({"model":"nope","prompt":"x"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found") << r.body;
  r = call(httpSocket_, "GET", "/v1/chat/completions");
  EXPECT_EQ(r.status, 405);
  expectStillServing();
}

TEST_F(HttpDaemon, AHundredMegabyteBodyIsRefusedWith413BeforeItIsRead) {
  const int fd = rawConnect(httpSocket_);
  ASSERT_GE(fd, 0);
  constexpr size_t size = size_t(100) << 20;
  sendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(size) + "\r\n\r\n");
  // The body goes on in the background until the daemon closes the connection on it.
  auto writer = std::async(std::launch::async, [fd] {
    const std::string block(1 << 16, 'x');
    for (size_t sent = 0; sent < size; sent += block.size()) {
      if (!sendAll(fd, block)) return sent;
    }
    return size;
  });
  const Reply r = parseReply(readResponse(fd, 20s));
  ::shutdown(fd, SHUT_RDWR);
  const size_t sent = writer.get();
  ::close(fd);
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_LT(sent, size) << "the daemon read the whole 100 MB";
  expectStillServing();
}

TEST_F(HttpDaemon, AClientSendingOneByteASecondIsCutOffWhileOthersAreServed) {
  const int fd = rawConnect(httpSocket_);
  ASSERT_GE(fd, 0);
  const auto started = std::chrono::steady_clock::now();
  auto slow = std::async(std::launch::async, [fd] {
    const std::string req = request("POST", "/v1/completions", kGreedy + "}");
    for (char c : req) {
      if (!sendAll(fd, std::string(1, c))) return false;  // cut off
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) == 1) return true;  // the daemon answered (or closed)
    }
    return false;
  });
  expectStillServing();  // while the slow client dribbles
  EXPECT_TRUE(slow.wait_for(scaled(10s)) == std::future_status::ready) << "the slow client was not cut off";
  slow.get();
  const std::string rest = readAll(fd, 5s);
  ::close(fd);
  EXPECT_TRUE(rest.empty() || parseReply(rest).status == 408) << rest;
  EXPECT_LT(std::chrono::steady_clock::now() - started, scaled(10s));
}

TEST_F(HttpDaemon, ABodyThatStopsHalfWayGets408AfterTheBodyTimeout) {
  const int fd = rawConnect(httpSocket_);
  ASSERT_GE(fd, 0);
  const auto started = std::chrono::steady_clock::now();
  sendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":");
  const Reply r = parseReply(readResponse(fd, 10s));
  ::close(fd);
  EXPECT_EQ(r.status, 408) << r.body;
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1400ms);  // http_body_timeout_ms = 1500
  expectStillServing();
}

TEST_F(HttpDaemon, AThousandIdleConnectionsNeitherStopOthersNorStayOpen) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  std::vector<int> idle;
  for (int i = 0; i < 1000; i++) {
    const int fd = rawConnect(httpSocket_);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_GE(idle.size(), 900u);
  // Past http_max_connections the oldest idle ones make room: a real request gets through at once.
  expectStillServing();
  // And the rest are closed by the header timeout.
  size_t closed = 0;
  const auto deadline = std::chrono::steady_clock::now() + scaled(15s);
  while (closed < idle.size() && std::chrono::steady_clock::now() < deadline) {
    closed = 0;
    for (int fd : idle) {
      char c;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 1 && ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) closed++;
    }
    std::this_thread::sleep_for(100ms);
  }
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(closed, idle.size());
  expectStillServing();
}

TEST_F(HttpDaemon, AClientVanishingMidStreamCancelsItsGenerationAndFreesItsKv) {
  const double failuresBefore = std::max(0.0, metric("request_failures_total"));
  const int fd = rawConnect(httpSocket_);
  ASSERT_GE(fd, 0);
  // Twenty alternatives per token make each event ~1 KB: the daemon's socket buffer fills long
  // before the reply ends, so the reply waits on this client, which never reads.
  sendAll(
      fd,
      request(
          "POST", "/v1/completions",
          R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":100000,"logprobs":20,"stream":true})"));
  const bool waiting = waitUntil(
      [&] {
        const json p = ps();  // (a range-for over a part of a temporary would outlive it)
        for (const auto& m : p["models"]) {
          for (const auto& s : m["sessions"]) {
            if (s["state"] == "waiting") return true;
          }
        }
        return false;
      },
      20s, 20ms);
  ::close(fd);
  ASSERT_TRUE(waiting) << "the reply never waited for its reader: " << ps().dump();
  EXPECT_TRUE(waitUntil([&] { return sessions() == 0; }, 10s, 20ms)) << ps().dump();
  EXPECT_TRUE(waitUntil([&] { return metric("request_failures_total") == failuresBefore + 1; }, 10s, 20ms));
  EXPECT_TRUE(waitUntil(
      [&] {
        return call(httpSocket_, "GET", "/metrics")
                   .body.find("jitllm:kv_pages_used{model=\"stories260K\",device=\"cpu:0\"} 0\n") != std::string::npos;
      },
      10s, 20ms));
  expectStillServing();
}

TEST_F(HttpDaemon, AClientVanishingBeforeACompleteReplyCancelsItsGenerationToo) {
  const double failuresBefore = std::max(0.0, metric("request_failures_total"));
  const int fd = rawConnect(httpSocket_);
  ASSERT_GE(fd, 0);
  // Not streamed: nothing is written until the end (the context's 2,048 tokens), so only the
  // daemon's watch on the socket can notice the client leave.
  sendAll(fd, request("POST", "/v1/completions",
                      R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":100000,"ignore_eos":true})"));
  ASSERT_TRUE(waitUntil([&] { return sessions() == 1; }, 10s, 5ms)) << ps().dump();
  ::close(fd);
  EXPECT_TRUE(waitUntil([&] { return sessions() == 0; }, 10s, 10ms)) << ps().dump();
  EXPECT_TRUE(waitUntil([&] { return metric("request_failures_total") == failuresBefore + 1; }, 10s, 20ms))
      << "the generation ran to its end instead of being cancelled";
  expectStillServing();
}

TEST_F(HttpDaemon, ThirtyTwoConcurrentStreamingClientsEachGetTheGreedyReplyAndLeaveNothingBehind) {
  auto round = [&] {
    std::vector<std::future<std::pair<std::string, bool>>> clients;
    for (int i = 0; i < 32; i++) {
      clients.push_back(std::async(std::launch::async, [] {
        const int fd = rawConnect(httpSocket_);
        sendAll(fd, request("POST", "/v1/completions", kGreedy + R"(,"stream":true})"));
        const Reply r = parseReply(readResponse(fd));
        ::close(fd);
        bool done = false;
        std::string text = streamedText(r.body, &done);
        return std::make_pair(r.status == 200 ? text : "status " + std::to_string(r.status), done);
      }));
    }
    for (auto& c : clients) {
      auto [text, done] = c.get();
      EXPECT_EQ(text, reference_);
      EXPECT_TRUE(done) << "a stream did not end with [DONE]";
    }
  };
  round();  // the first round sizes the allocator's arenas and the KV pool
  const long rssBefore = daemon_->rssKiB();
  round();
  EXPECT_TRUE(waitUntil([&] { return sessions() == 0; }, 10s, 20ms));
  EXPECT_NE(call(httpSocket_, "GET", "/metrics")
                .body.find("jitllm:kv_pages_used{model=\"stories260K\",device=\"cpu:0\"} 0\n"),
            std::string::npos);
  if (!kSanitized) {
    const long rssAfter = daemon_->rssKiB();
    EXPECT_LE(rssAfter, rssBefore * 105 / 100) << "RSS grew from " << rssBefore << " to " << rssAfter << " KiB";
  }
}

TEST_F(HttpDaemon, HealthSaysOkAndMetricsCountWhatWasServed) {
  EXPECT_EQ(call(httpSocket_, "GET", "/health").status, 200);
  const double before = metric("generation_tokens_total");
  const Reply r = call(httpSocket_, "POST", "/v1/completions", kGreedy + "}");
  ASSERT_EQ(r.status, 200);
  const int generated = json::parse(r.body)["usage"]["completion_tokens"];
  EXPECT_TRUE(waitUntil([&] { return metric("generation_tokens_total") == before + generated; }, 5s, 10ms));
}

// OpenAI's service_tier names jitllm's tiers (docs/tiers.md): the reply says which tier it ran in,
// it is counted under that tier, and a name OpenAI does not have is a 400 naming the field. (The
// tests run as root, an admin: the 403 for a non-admin's raise is ServiceTier's unit test.)
TEST_F(HttpDaemon, ServiceTierPicksTheTierTheReplySaysItRanInAndItIsCountedThere) {
  const auto tierMetric = [&](const char* family, const char* tier) {
    const std::string body = call(httpSocket_, "GET", "/metrics").body;
    const std::string key = std::string("jitllm:") + family + "_total{model=\"" + kModel + "\",tier=\"" + tier + "\"} ";
    const size_t at = body.find(key);
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + key.size()));
  };
  const double before = tierMetric("tier_requests_finished", "batch");
  ASSERT_GE(before, 0);
  Reply r = call(httpSocket_, "POST", "/v1/completions", kGreedy + R"(,"service_tier":"flex"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["service_tier"], "flex") << r.body;
  EXPECT_TRUE(waitUntil([&] { return tierMetric("tier_requests_finished", "batch") == before + 1; }, 5s, 10ms));
  r = call(httpSocket_, "POST", "/v1/completions", kGreedy + R"(,"service_tier":"priority"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["service_tier"], "priority");
  r = call(httpSocket_, "POST", "/v1/completions", kGreedy + "}");
  EXPECT_EQ(json::parse(r.body)["service_tier"], "default") << "no field: the caller's default";
  r = call(httpSocket_, "POST", "/v1/completions", kGreedy + R"(,"service_tier":"scale"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "service_tier") << r.body;
  const json ps = json::parse(call(httpSocket_, "GET", "/jitllm/v1/ps").body);
  EXPECT_TRUE(ps.dump().find("\"goodput\"") != std::string::npos) << ps.dump();
  expectStillServing();
}

// systemd passes the HTTP socket beside the RPC one, told apart by LISTEN_FDNAMES; a model not
// loaded is loaded by name from the model dir on the first request, and unloaded again after
// its request's keep_alive.
TEST(HttpActivation, TheSocketNamedHttpServesHttpAndModelsLoadByNameAndUnloadAfterKeepAlive) {
  const std::string http =
      (std::filesystem::temp_directory_path() / ("jitllmd-http-act-" + std::to_string(::getpid()) + ".sock")).string();
  DaemonProcess d({"--scheduler-interval-ms", "0"}, true, 0, 0, http);
  ASSERT_TRUE(d.ready()) << d.log();
  Reply models = call(http, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  bool listed = false;
  const json list = json::parse(models.body);
  for (const auto& m : list["data"]) listed |= m["id"] == kModel && m["resident"] == false;
  EXPECT_TRUE(listed) << models.body;
  const Reply r = call(http, "POST", "/v1/completions", kGreedy + R"(,"keep_alive":0})");
  ASSERT_EQ(r.status, 200) << r.body << d.log();
  EXPECT_TRUE(
      waitUntil([&] { return json::parse(call(http, "GET", "/jitllm/v1/ps").body)["models"].empty(); }, 10s, 50ms))
      << "keep_alive 0 did not unload the model";
  ::unlink(http.c_str());
}

// A model's sessions all busy: 429 with Retry-After, in OpenAI's shape, and served once one frees.
TEST(HttpOverload, AFullModelAnswers429WithRetryAfterAndServesOnceASessionFrees) {
  const auto config =
      std::filesystem::temp_directory_path() / ("jitllmd-http-busy-" + std::to_string(::getpid()) + ".conf");
  std::ofstream(config) << "max_sessions = 1\nidle_sessions = 0\nscheduler_interval_ms = 0\n";
  const std::string http =
      (std::filesystem::temp_directory_path() / ("jitllmd-http-busy-" + std::to_string(::getpid()) + ".sock")).string();
  DaemonProcess d({"--config", config.string(), "--http", "unix:" + http, "--preload",
                   kModel + "=" + sharedPath("models/stories260K.gguf")});
  std::filesystem::remove(config);
  ASSERT_TRUE(d.ready()) << d.log();
  // The one session, held by a client that does not read its (large) stream.
  const int holder = rawConnect(http);
  sendAll(
      holder,
      request(
          "POST", "/v1/completions",
          R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":100000,"logprobs":20,"stream":true})"));
  ASSERT_TRUE(waitUntil(
      [&] {
        const json p = json::parse(call(http, "GET", "/jitllm/v1/ps").body, nullptr, false);
        return p.is_object() && !p["models"].empty() && !p["models"][0]["sessions"].empty();
      },
      10s, 10ms));
  const int fd = rawConnect(http);
  sendAll(fd, request("POST", "/v1/completions", kGreedy + "}"));
  const std::string raw = readResponse(fd);
  ::close(fd);
  const Reply busy = parseReply(raw);
  EXPECT_EQ(busy.status, 429) << raw;
  EXPECT_NE(raw.find("Retry-After: 1\r\n"), std::string::npos) << raw;
  EXPECT_EQ(json::parse(busy.body, nullptr, false)["error"]["type"], "rate_limit_error") << busy.body;
  ::close(holder);
  EXPECT_TRUE(waitUntil([&] { return call(http, "POST", "/v1/completions", kGreedy + "}").status == 200; }, 10s, 20ms));
  ::unlink(http.c_str());
}

// While the daemon drains (SIGTERM, a reply still running), /health says 503 on a connection that
// was open before, and new connections are refused.
TEST(HttpDrain, HealthSays503WhileTheDaemonDrains) {
  const std::string http =
      (std::filesystem::temp_directory_path() / ("jitllmd-http-drain-" + std::to_string(::getpid()) + ".sock"))
          .string();
  DaemonProcess d({"--http", "unix:" + http, "--grace-period", "20", "--preload",
                   kModel + "=" + sharedPath("models/stories260K.gguf")});
  ASSERT_TRUE(d.ready()) << d.log();
  const int holder = rawConnect(http);  // a reply that keeps the drain waiting
  sendAll(
      holder,
      request(
          "POST", "/v1/completions",
          R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":100000,"logprobs":20,"stream":true})"));
  const int probe = rawConnect(http);
  sendAll(probe, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(parseReply(readResponse(probe)).status, 200);
  ::kill(d.pid(), SIGTERM);
  ASSERT_TRUE(d.notify().waitFor("STOPPING=1", 10s));
  EXPECT_TRUE(waitUntil(
      [&] {
        const int fd = rawConnect(http);
        if (fd >= 0) ::close(fd);
        return fd < 0;
      },
      5s, 10ms))
      << "the listener still accepts";
  sendAll(probe, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const Reply draining = parseReply(readResponse(probe));
  EXPECT_EQ(draining.status, 503) << d.log().substr(d.log().size() > 3000 ? d.log().size() - 3000 : 0);
  EXPECT_EQ(json::parse(draining.body, nullptr, false)["status"], "draining") << draining.body;
  ::close(probe);
  ::close(holder);  // its generation is cancelled; the drain ends
  EXPECT_EQ(d.waitExit(std::chrono::seconds(30)), 0);
}

// jitllm's own routes mirror the RPC: migrate and pin move layers (admin: this test runs as root),
// ps shows where they are, events streams what happened, and /metrics counts the migrations.
TEST(HttpJitllmRoutes, MigratePinPsAndEventsWorkAndMetricsCountTheMigrations) {
  const std::string http =
      (std::filesystem::temp_directory_path() / ("jitllmd-http-routes-" + std::to_string(::getpid()) + ".sock"))
          .string();
  DaemonProcess d({"--devices", "cpu:0,cpu:1", "--scheduler-interval-ms", "0", "--http", "unix:" + http, "--preload",
                   kModel + "=" + sharedPath("models/stories260K.gguf")});
  ASSERT_TRUE(d.ready()) << d.log();
  const int events = rawConnect(http);
  sendAll(events, "GET /jitllm/v1/events HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_NE(readUntil(events, 10s, [](const std::string& r) { return r.find("\r\n\r\n") != std::string::npos; })
                .find(" 200 "),
            std::string::npos);

  Reply r = call(http, "POST", "/jitllm/v1/migrate", R"({"model":"stories260K","device":"cpu:1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["committed"], true) << r.body;
  r = call(http, "POST", "/jitllm/v1/pin", R"({"model":"stories260K","device":"cpu:0","layers":"0-1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json ps = json::parse(call(http, "GET", "/jitllm/v1/ps").body);
  const json& units = ps["models"][0]["units"];
  EXPECT_EQ(units[1]["device"], "cpu:0");  // blk.0, pinned home
  EXPECT_EQ(units[1]["pinned"], "cpu:0");
  EXPECT_EQ(units[3]["device"], "cpu:1");  // blk.2, where the migration put it
  r = call(http, "POST", "/jitllm/v1/migrate", R"({"model":"stories260K","device":"cpu:9"})");
  EXPECT_EQ(r.status, 400) << r.body;

  const std::string streamed =
      readUntil(events, 10s, [](const std::string& s) { return s.find("layers.pinned") != std::string::npos; });
  ::close(events);
  EXPECT_NE(streamed.find("\"what\":\"migration.committed\""), std::string::npos) << streamed;
  const std::string metrics = call(http, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("jitllm:migrations_total{model=\"stories260K\"} 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("jitllm:migration_pause_seconds_count{model=\"stories260K\"} 2\n"), std::string::npos);
  ::unlink(http.c_str());
}

// Device telemetry (here scripted, as NVML would report it) reaches /metrics with the device label.
TEST(HttpMetrics, DeviceTemperatureFromTelemetryIsExported) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllmd-http-telemetry-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "telemetry") << "0 cpu:0 temp=61\n";
  const std::string http = (dir / "http.sock").string();
  DaemonProcess d(
      {"--telemetry-script", (dir / "telemetry").string(), "--scheduler-interval-ms", "50", "--http", "unix:" + http});
  ASSERT_TRUE(d.ready()) << d.log();
  EXPECT_TRUE(waitUntil(
      [&] {
        return call(http, "GET", "/metrics").body.find("jitllm:device_temperature_celsius{device=\"cpu:0\"} 61\n") !=
               std::string::npos;
      },
      10s, 20ms))
      << call(http, "GET", "/metrics").body;
  std::filesystem::remove_all(dir);
}

// A sample of /metrics at `socket`, e.g. page_outs_total with labels model="stories260K",kind="kv"
// (-1 when absent).
double sample(const std::string& socket, const std::string& name, const std::string& labels) {
  const std::string body = call(socket, "GET", "/metrics").body;
  const std::string key = "jitllm:" + name + "{" + labels + "} ";
  const size_t at = body.find(key);
  return at == std::string::npos ? -1 : std::stod(body.substr(at + key.size()));
}

// Memory pressure on the GPU (lavapipe here, told 95 % full by the telemetry script appended once
// the first reply is done) parks the idle session's KV in host RAM: a KV page-out in /metrics. The
// conversation's next turn brings the KV back: a KV page-in, and the turn computes only its new
// tokens.
TEST(HttpMetrics, ParkingAnIdleSessionsKvIsAPageOutAndItsReturnAPageIn) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllmd-http-park-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto telemetry = dir / "telemetry";
  std::ofstream(telemetry) << "# pressure is appended once a session is idle\n";
  const std::string http = (dir / "http.sock").string();
  DaemonProcess d({"--devices", "vulkan:0", "--telemetry-script", telemetry.string(), "--scheduler-interval-ms", "50",
                   "--http", "unix:" + http});
  if (!d.ready() && d.log().find("vulkan") != std::string::npos) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "no Vulkan device for the daemon here: " << d.log().substr(0, 400);
  }
  ASSERT_TRUE(d.ready()) << d.log();
  const std::string labels = "model=\"" + kModel + "\",kind=\"kv\"";
  const Reply first = call(http, "POST", "/v1/completions", kGreedy + "}");
  ASSERT_EQ(first.status, 200) << first.body << d.log();
  const std::string text = json::parse(first.body)["choices"][0]["text"];
  EXPECT_EQ(sample(http, "page_outs_total", labels), 0);

  std::ofstream(telemetry, std::ios::app) << "0 vulkan:0 mem_used=95G mem_total=100G\n";
  EXPECT_TRUE(waitUntil([&] { return sample(http, "page_outs_total", labels) == 1; }, 20s, 20ms))
      << call(http, "GET", "/metrics").body << d.log();
  std::ofstream(telemetry, std::ios::app) << "0 vulkan:0 mem_used=1G mem_total=100G\n";

  // The next turn of the same text: its KV comes back from host RAM.
  const Reply second = call(
      http, "POST", "/v1/completions",
      json{{"model", kModel}, {"prompt", "Once upon a time" + text + " And"}, {"max_tokens", 8}, {"temperature", 0}}
          .dump());
  ASSERT_EQ(second.status, 200) << second.body << d.log();
  EXPECT_TRUE(waitUntil([&] { return sample(http, "page_ins_total", labels) == 1; }, 10s, 20ms))
      << call(http, "GET", "/metrics").body << d.log();
  EXPECT_EQ(sample(http, "page_outs_total", labels), 1);
  std::filesystem::remove_all(dir);
}

// While preloads load the sockets are already served, and /health says 503 "starting" until the
// daemon is ready, then 200. The preload is a model on Vulkan (lavapipe here) with no kernel
// cache, so its shaders compile while a thread asks /health.
TEST(HttpHealth, ItSays503StartingWhilePreloadsLoadThen200) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllmd-http-start-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string http = (dir / "http.sock").string();
  std::atomic<bool> stop{false};
  std::vector<std::string> seen;  // each distinct /health answer, in order: "503 starting", "200 ok"
  std::thread poller([&] {
    while (!stop) {
      const int fd = rawConnect(http);
      if (fd >= 0) {
        sendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        const Reply r = parseReply(readResponse(fd));
        ::close(fd);
        const json body = json::parse(r.body, nullptr, false);
        const std::string answer =
            std::to_string(r.status) + " " + (body.is_object() ? body.value("status", std::string()) : r.body);
        if (seen.empty() || seen.back() != answer) seen.push_back(answer);
      }
      std::this_thread::sleep_for(2ms);
    }
  });
  const auto d = [&] {
    const ScopedEnv noCache("JITLLM_CACHE_DIR", "");  // no disk cache: the preload compiles its kernels
    return std::make_unique<DaemonProcess>(
        std::vector<std::string>{"--devices", "vulkan:0", "--http", "unix:" + http, "--preload",
                                 kModel + "=" + sharedPath("models/stories260K.gguf")});
  }();
  const bool ready = d->ready();
  // Ready: the next answer is 200.
  EXPECT_TRUE(waitUntil([&] { return call(http, "GET", "/health").status == 200; }, 10s, 10ms));
  std::this_thread::sleep_for(20ms);
  stop = true;
  poller.join();
  std::filesystem::remove_all(dir);
  if (!ready && d->log().find("vulkan") != std::string::npos) {
    GTEST_SKIP() << "no Vulkan device for the daemon here: " << d->log().substr(0, 400);
  }
  ASSERT_TRUE(ready) << d->log();
  ASSERT_GE(seen.size(), 2u) << "the preload was too quick to be seen starting";
  EXPECT_EQ(seen.front(), "503 starting");
  EXPECT_EQ(seen.back(), "200 ok");
}

int tcpConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

int tcpStatus(int port, const std::string& method, const std::string& path, const std::string& token,
              const std::string& body = "") {
  const int fd = tcpConnect(port);
  if (fd < 0) return 0;
  std::string req = request(method, path, body);
  if (!token.empty()) req.insert(req.find("\r\n") + 2, "Authorization: Bearer " + token + "\r\n");
  sendAll(fd, req);
  const Reply r = parseReply(readResponse(fd));
  ::close(fd);
  return r.status;
}

// Over TCP: tokens when configured (401 without, 403 for an admin route with a client's token),
// and no non-loopback address without them.
TEST(HttpTcp, BearerTokensAdmitClientsAndAdminsAndAPublicAddressNeedsThem) {
  const auto dir = std::filesystem::temp_directory_path() / ("jitllmd-http-tcp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string tokens = (dir / "tokens").string();
  const std::string client = "client-token-0123456789", admin = "admin-token-0123456789";
  std::ofstream(tokens) << client << "\n" << admin << " admin\n";
  std::filesystem::permissions(tokens, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const int port = freePort();
  DaemonProcess d({"--http", "127.0.0.1:" + std::to_string(port), "--http-token-file", tokens});
  ASSERT_TRUE(d.ready()) << d.log();
  EXPECT_EQ(tcpStatus(port, "GET", "/v1/models", ""), 401);
  EXPECT_EQ(tcpStatus(port, "GET", "/v1/models", "wrong-token-0123456789"), 401);
  EXPECT_EQ(tcpStatus(port, "GET", "/v1/models", client), 200);
  EXPECT_EQ(tcpStatus(port, "GET", "/health", ""), 200);
  EXPECT_EQ(tcpStatus(port, "POST", "/jitllm/v1/unload", client, R"({"model":"x"})"), 403);
  EXPECT_EQ(tcpStatus(port, "POST", "/jitllm/v1/unload", admin, R"({"model":"x"})"),
            400);  // past the check: no model x

  // Without tokens, a public address stops the daemon before it serves.
  const std::string log = (dir / "open.log").string();
  const int status =
      std::system((binPath("jitllmd") + " --socket " + (dir / "open.sock").string() +
                   " --devices cpu:0 --threads 1 --http 0.0.0.0:" + std::to_string(freePort()) + " 2>" + log)
                      .c_str());
  EXPECT_NE(status, 0);
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(said.find("not a loopback address"), std::string::npos) << said;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace jitllm::testing
