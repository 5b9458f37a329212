// The event loop kept free (issue 50): what a request needs before it can be queued - its chat
// template rendered, its prompt tokenized - runs off the one thread that streams every reply, so a
// client sending a 32K-token prompt does not stall the others.
//
// Measured at the code that rendered on the loop (0894fc5), on the dev VM: a 32K-token prompt of
// the tiny shape's llama-spm vocabulary took ~100 ms to tokenize, and every one of the 8 streams
// stood still for all of it - 108-114 ms against its usual 12-13 ms. This test fails there.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tests/daemon/daemon_harness.h"
#include "tests/daemon/http_client.h"
#include "tests/scoped_test_state.h"
#include "tools/random_model.h"

namespace jitllm::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// One streaming client: when each of its reply's events arrived.
class TimedStream {
 public:
  TimedStream(const std::string& socket, const std::string& body) : fd_(rawConnect(socket)) {
    if (fd_ >= 0) sendAll(fd_, request("POST", "/v1/completions", body));
    reader_ = std::thread([this] { read(); });
  }
  ~TimedStream() {
    stop_ = true;
    reader_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  std::vector<Clock::time_point> arrivals() const {
    std::lock_guard lock(mutex_);
    return arrivals_;
  }
  bool ended() const { return ended_; }

 private:
  void read() {
    char buf[65536];
    while (!stop_ && fd_ >= 0) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      const auto now = Clock::now();
      if (n <= 0) break;
      const std::string got(buf, size_t(n));
      if (got.find("data: ") == std::string::npos) continue;  // headers alone
      std::lock_guard lock(mutex_);
      arrivals_.push_back(now);
      if (got.find("[DONE]") != std::string::npos) break;
    }
    ended_ = true;
  }

  int fd_;
  std::atomic<bool> stop_{false}, ended_{false};
  mutable std::mutex mutex_;
  std::vector<Clock::time_point> arrivals_;
  std::thread reader_;
};

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A stream's usual gap on this machine at this moment: the longest between two of its events in
// [from, to], a stretch without a big prompt (the test takes one before it and one after, longer
// than its preparation) - the worst a stream normally waits under whatever else the machine
// is doing: a loaded CI machine stretches every gap alike, a render on the event loop stops every
// stream at once for all of it.
double usualGapMs(const std::vector<Clock::time_point>& t, Clock::time_point from, Clock::time_point to) {
  double longest = 0;
  for (size_t i = 1; i < t.size(); i++) {
    if (t[i - 1] >= from && t[i] <= to) longest = std::max(longest, ms(t[i] - t[i - 1]));
  }
  return longest;
}

// The longest wait for an event while [from, to] lasted: the gaps that overlap it, and the one
// still open at `to` when no event came after it.
double longestGapMs(const std::vector<Clock::time_point>& t, Clock::time_point from, Clock::time_point to) {
  double longest = 0;
  for (size_t i = 1; i < t.size(); i++) {
    if (t[i] > from && t[i - 1] < to) longest = std::max(longest, ms(t[i] - t[i - 1]));
  }
  if (!t.empty() && t.back() < to) longest = std::max(longest, ms(to - std::max(t.back(), from)));
  return longest;
}

TEST(HttpEventLoop, EightStreamsKeepTheirPaceWhileA32kTokenPromptIsPrepared) {
  const TempDir dir;
  const std::string model = dir.path() + "/tiny.gguf";
  tools::writeRandomModel({*tools::findShape("tiny"), *tools::findMix("q8_0"), 7, JITLLM_SHARED_DIR}, model);
  const std::string config = dir.path() + "/jitllmd.conf";
  std::ofstream(config) << "idle_sessions = 0\nhttp_max_body_bytes = 4M\nscheduler_interval_ms = 0\n";
  const std::string socket = dir.path() + "/http.sock";
  DaemonProcess d({"--config", config, "--http", "unix:" + socket, "--preload", "tiny=" + model, "--default-context",
                   "2048", "--log-level", "info"});
  ASSERT_TRUE(d.ready()) << d.log();

  // Eight replies long enough to outlast the measurement.
  const std::string streamBody =
      R"({"model":"tiny","prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true,"stream":true})";
  std::vector<std::unique_ptr<TimedStream>> streams;
  for (int i = 0; i < 8; i++) streams.push_back(std::make_unique<TimedStream>(socket, streamBody));
  ASSERT_TRUE(waitUntil(
      [&] {
        return std::all_of(streams.begin(), streams.end(), [](const auto& s) { return s->arrivals().size() >= 40; });
      },
      60s, 5ms))
      << d.log();

  // The streams' pace without a big prompt, over a stretch longer than its preparation takes.
  const auto baselineFrom = Clock::now();
  std::this_thread::sleep_for(scaled(1500ms));
  const auto baselineTo = Clock::now();

  // About 32K tokens of llama-spm: the template renders it, the tokenizer takes it apart, and the
  // reply is refused only then (it does not fit the context): all the work is the preparation.
  std::string story;
  for (int i = 0; i < 1600; i++) story += "Once upon a time there was a little girl who liked to play in the park. ";
  const std::string bigBody = json{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", story}}}}}.dump();
  const int big = rawConnect(socket);
  ASSERT_GE(big, 0);
  const auto sent = Clock::now();
  ASSERT_TRUE(sendAll(big, request("POST", "/v1/chat/completions", bigBody)));
  const Reply refused = parseReply(readResponse(big, 120s));
  const auto answered = Clock::now();
  ::close(big);
  EXPECT_EQ(refused.status, 400) << refused.body.substr(0, 300);
  EXPECT_NE(refused.body.find("does not fit the context"), std::string::npos) << refused.body.substr(0, 300);
  // ... and after it, over a stretch twice as long as it took (a loaded machine stretches it), so
  // that the worst gap around it has had more chances to show than the one measured.
  std::this_thread::sleep_for(std::max<Clock::duration>(2 * (answered - sent), scaled(1000ms)));
  const auto afterTo = Clock::now();

  for (size_t i = 0; i < streams.size(); i++) {
    const auto t = streams[i]->arrivals();
    ASSERT_FALSE(streams[i]->ended() && t.back() < answered) << "stream " << i << " ended during the measurement";
    const double usual = std::max(usualGapMs(t, baselineFrom, baselineTo), usualGapMs(t, answered, afterTo));
    const double longest = longestGapMs(t, sent, answered);
    std::printf("stream %zu: longest gap %.2f ms before and after, %.2f ms while the prompt was prepared (%.1f ms)\n",
                i, usual, longest, ms(answered - sent));
    EXPECT_GT(usual, 0) << "stream " << i << " had no two events in the stretch before";
    EXPECT_LE(longest, 2 * usual) << "stream " << i << " waited " << longest << " ms while the prompt was prepared ("
                                  << ms(answered - sent) << " ms), its longest gap before and after being " << usual
                                  << " ms";
  }
}

}  // namespace
}  // namespace jitllm::testing
