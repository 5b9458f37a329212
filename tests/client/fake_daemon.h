// A stand-in for jitllmd that serves the RPC contract (libclient/jitllm.capnp) on a Unix socket
// from its own thread, so that libclient and jitllmctl can be tested without the real daemon.
// Its behaviour is scripted and simple, and it records what clients sent:
//   - one device "cpu:0"; models appear on load and go on unload;
//   - load reads the passed descriptor's first bytes and refuses anything that is not "GGUF";
//     it reports three progress stages;
//   - generate produces maxTokens tokens 100, 101, ... with text "t0 t1 ..." one token per
//     streaming call, waiting `tokenDelay` between them (so a test can cancel mid-stream);
//   - chat answers "you said: <last user message>" and records the history it was given;
//   - a model named "overloaded" / "unimplemented" / "failed" fails with that kind; "hangup"
//     makes the daemon drop every connection after two tokens;
//   - events replays what load/unload emitted, then streams new ones;
//   - a model has 7 units (token_embd, blk.0..blk.4, output), all on cpu:0 when loaded, each of
//     128 KiB of weights; ModelInfo.layerStates reports them, with 1 KV page per 4 tokens of each
//     running session on every block;
//   - migrate moves a range ("", "3", "0-4", "embd-head", "2-output", as the daemon parses them)
//     to "cpu:0" or "cpu:1" with canned stats (pause 0.412 ms, prepare 12.34 ms, 512 KiB
//     pre-copied and 8 KiB in the pause, or all 520 KiB in the pause without precopy, 3 sessions)
//     and emits migration.preparing and migration.committed; without `wait` it only stages the
//     range (LayerState.stagedOn, ModelInfo.migration) and the model's next migrate fails as
//     "already running"; a unit pinned to another device fails it unless `force`;
//   - pin moves what is elsewhere, then pins (layers.pinned); unpin lifts pins (layers.unpinned);
//   - with Options::migration false, migrate, pin and unpin are unimplemented (an older daemon).
//
// Thread-safety: the public methods may be called from the test thread while it serves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace jitllm::testing {

// A migrate or pin call as the daemon received it (pin leaves wait, precopy and force alone).
struct FakeMigrateCall {
  std::string model;
  std::string layers;
  std::string device;
  bool wait = false;
  bool precopy = false;
  bool force = false;
};

struct FakeDaemonRecord {
  std::vector<std::string> loadedPaths;      // ModelSource.path values
  std::vector<uint64_t> loadMaxDeviceBytes;  // LoadOptions.maxDeviceBytes of each load
  std::vector<std::string> fileMagics;       // first 4 bytes of each passed descriptor
  std::vector<size_t> chatHistorySizes;      // messages per chat call
  std::vector<std::string> chatLastUser;
  std::vector<uint64_t> cancelledSessions;
  std::vector<std::string> prompts;  // GenerateRequest.prompt.text
  std::vector<std::vector<int32_t>> promptTokens;
  size_t generationsCancelled = 0;  // generate/chat calls dropped by the client
  size_t generationsCompleted = 0;
  size_t subscriptionsEnded = 0;
  float lastTemperature = -1;
  uint64_t lastSeed = 0;
  uint32_t lastMaxTokens = 0;
  std::string lastTier;
  std::vector<FakeMigrateCall> migrations;  // every migrate call, refused ones included
  std::vector<FakeMigrateCall> pins;
  std::vector<std::pair<std::string, std::string>> unpins;  // (model, layers)
  // For each streamed chunk: milliseconds from sending it to the client's answer (flow control).
  std::vector<double> chunkAnswerMs;
};

class FakeDaemon final {
 public:
  struct Options {
    uint32_t protocol = 0;  // 0: the schema's protocolVersion
    std::chrono::milliseconds tokenDelay{0};
    bool migration = true;  // false: migrate, pin and unpin are unimplemented (an older daemon)
  };

  // Starts serving on `socketPath`; returns once it listens.
  explicit FakeDaemon(std::string socketPath) : FakeDaemon(std::move(socketPath), Options{}) {}
  FakeDaemon(std::string socketPath, Options options);
  ~FakeDaemon();  // stops serving, closing every connection
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  const std::string& socketPath() const { return socketPath_; }
  FakeDaemonRecord record() const;
  // Waits (bounded) until `pred(record)` holds; false on timeout.
  template <typename Pred>
  bool waitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    std::unique_lock lock(state_->mutex);
    return state_->changed.wait_for(lock, timeout, [&] { return pred(state_->record); });
  }

  struct SharedState {
    mutable std::mutex mutex;
    std::condition_variable changed;
    FakeDaemonRecord record;
  };

 private:
  void serve();

  std::string socketPath_;
  Options options_;
  std::shared_ptr<SharedState> state_ = std::make_shared<SharedState>();
  struct Control;
  std::unique_ptr<Control> control_;
  std::thread thread_;
};

}  // namespace jitllm::testing
