// The scheduler's scenarios end to end: a real jitllmd with --devices cpu:0,cpu:1,vulkan:0 and a
// telemetry script the test appends to (the daemon follows the file), driven over Cap'n Proto.
// A device vanishes mid-generation, a device arrives, a model does not fit.
#include <fstream>

#include "tests/daemon/daemon_calls.h"

namespace jitllm::testing {
namespace {

constexpr char kPrompt[] = "Once upon a time";

class ScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(sharedPath("models/stories260K.gguf"))) GTEST_SKIP() << "no stories260K";
    dir_ = std::filesystem::temp_directory_path() / ("jitllmd-scenario-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    script_ = (dir_ / "telemetry").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Starts jitllmd on `devices`, following the script; false (and a skip) when this build or
  // machine has no Vulkan device.
  bool start(const std::string& devices, const std::string& scriptText) {
    std::ofstream(script_) << scriptText;
    // Replies stay mid-way while their readers are slow: two tokens queue before the session waits.
    std::ofstream(dir_ / "jitllmd.conf") << "max_queued_tokens = 2\n";
    daemon_ = std::make_unique<DaemonProcess>(
        std::vector<std::string>{"--devices", devices, "--config", (dir_ / "jitllmd.conf").string(),
                                 "--telemetry-script", script_, "--scheduler-interval-ms", "50"});
    if (!daemon_->ready()) {
      const std::string log = daemon_->log();
      if (log.find("vulkan") != std::string::npos || log.find("Vulkan") != std::string::npos) {
        skipReason_ = "no Vulkan device: " + log.substr(log.size() > 400 ? log.size() - 400 : 0);
        return false;
      }
      ADD_FAILURE() << log;
      return false;
    }
    io_.emplace(kj::setupAsyncIo());
    c_ = std::make_unique<RpcConnection>(*io_, daemon_->socket());
    return true;
  }
  void append(const std::string& line) { std::ofstream(script_, std::ios::app) << line << "\n"; }

  std::vector<std::string> placement(const std::string& model) {
    auto resp = c_->daemon().modelsRequest().send().wait(io_->waitScope);
    std::vector<std::string> where;
    for (auto m : resp.getModels()) {
      if (std::string(m.getName().cStr()) != model) continue;
      for (auto l : m.getLayerStates()) where.push_back(l.getDevice());
    }
    return where;
  }
  bool eventually(const std::function<bool()>& condition) {
    const auto deadline = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(60));
    while (std::chrono::steady_clock::now() < deadline) {
      if (condition()) return true;
      io_->provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io_->waitScope);
    }
    return false;
  }
  static bool allOn(const std::vector<std::string>& where, const std::string& device) {
    return !where.empty() && std::all_of(where.begin(), where.end(), [&](const auto& d) { return d == device; });
  }
  // Waits until the streamed reply has `n` tokens.
  void streamed(const std::shared_ptr<CollectingSink::State>& state, size_t n) {
    EXPECT_TRUE(eventually([&] { return state->ids.size() >= n; })) << daemon_->log();
  }

  std::filesystem::path dir_;
  std::string script_, skipReason_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::optional<kj::AsyncIoContext> io_;
  std::unique_ptr<RpcConnection> c_;
};

TEST_F(ScenarioTest, ADeviceVanishingMidGenerationEndsOnlyTheSessionsOnItAndTheModelIsReplaced) {
  if (!start("cpu:0,cpu:1,vulkan:0", "0 cpu:1 present=1\n")) GTEST_SKIP() << skipReason_;
  loadStories(*io_, *c_, "split", "cpu:0,cpu:1");
  loadStories(*io_, *c_, "stories", "cpu:0");
  const GenerateResult reference = generate(*c_, kPrompt, 60).wait(io_->waitScope);
  ASSERT_EQ(reference.ids.size(), 60u);

  auto& timer = io_->provider->getTimer();
  auto splitState = std::make_shared<CollectingSink::State>();
  auto storiesState = std::make_shared<CollectingSink::State>();
  auto onSplit = generate(*c_, kPrompt, 60, splitState, &timer, 20 * kj::MILLISECONDS, "split");
  auto onStories = generate(*c_, kPrompt, 60, storiesState, &timer, 20 * kj::MILLISECONDS);
  streamed(splitState, 5);
  streamed(storiesState, 5);
  append("0 cpu:1 present=0  # unplugged now");

  const std::string error = errorOf(onSplit.ignoreResult(), io_->waitScope);
  EXPECT_NE(error.find("cpu:1 went away"), std::string::npos) << error;
  EXPECT_NE(error.find("start it again"), std::string::npos) << error;
  EXPECT_LT(splitState->ids.size(), 60u);
  const GenerateResult survivor = onStories.wait(io_->waitScope);
  EXPECT_EQ(survivor.ids, reference.ids) << "a session on the devices left is untouched";

  EXPECT_TRUE(allOn(placement("split"), "cpu:0")) << daemon_->log();
  auto devices = c_->daemon().devicesRequest().send().wait(io_->waitScope);
  ASSERT_EQ(devices.getDevices().size(), 3u);
  EXPECT_FALSE(devices.getDevices()[1].getOnline());
  EXPECT_NE(std::string(devices.getDevices()[1].getOfflineReason().cStr()).find("gone"), std::string::npos);
  EXPECT_TRUE(devices.getDevices()[0].getOnline());
  // The re-placed model answers again with its tokens; the lost device cannot be a target.
  EXPECT_EQ(generate(*c_, kPrompt, 60, nullptr, nullptr, 0 * kj::MILLISECONDS, "split").wait(io_->waitScope).ids,
            reference.ids);
  auto toLost = c_->daemon().migrateRequest();
  toLost.initRequest().setModel("stories");
  toLost.getRequest().setDevice("cpu:1");
  EXPECT_NE(errorOf(toLost.send().ignoreResult(), io_->waitScope).find("cpu:1' is offline"), std::string::npos);

  const std::string log = daemon_->log();
  EXPECT_NE(log.find("device.removed: cpu:1 went away"), std::string::npos) << log;
  EXPECT_NE(log.find("re-placed blk.3-output of split on cpu:0"), std::string::npos) << log;
  EXPECT_NE(log.find("session.disconnected"), std::string::npos) << log;
}

TEST_F(ScenarioTest, ADeviceThatArrivesTakesTheLayersOfASlowerDeviceWhileAReplyStreams) {
  if (!start("cpu:0,cpu:1,vulkan:0", "0 cpu:1 present=0\n")) GTEST_SKIP() << skipReason_;
  loadStories(*io_, *c_, "stories", "vulkan:0");  // the software device, slowest of the three
  ASSERT_TRUE(allOn(placement("stories"), "vulkan:0"));
  auto& timer = io_->provider->getTimer();
  auto state = std::make_shared<CollectingSink::State>();
  auto reply = generate(*c_, kPrompt, 60, state, &timer, 20 * kj::MILLISECONDS);
  streamed(state, 5);
  append("0 cpu:1 present=1  # plugged in");
  const GenerateResult moved = reply.wait(io_->waitScope);
  EXPECT_TRUE(eventually([&] { return allOn(placement("stories"), "cpu:1"); })) << daemon_->log();
  // The same reply from a model that never moved (now on cpu:1): the streamed one is identical.
  EXPECT_EQ(moved.ids, generate(*c_, kPrompt, 60).wait(io_->waitScope).ids);
  const std::string log = daemon_->log();
  EXPECT_NE(log.find("device.added: cpu:1 is online"), std::string::npos) << log;
  EXPECT_NE(log.find("cpu:1 arrived and is faster than vulkan:0"), std::string::npos) << log;
}

TEST_F(ScenarioTest, AThirdModelThatDoesNotFitPagesOutAnIdleOneAndEveryRequestIsAnswered) {
  // Room on the Vulkan device for two stories models (about 4 MiB each as placed), not three.
  if (!start("cpu:0,cpu:1,vulkan:0@10M", "")) GTEST_SKIP() << skipReason_;
  loadStories(*io_, *c_, "stories", "vulkan:0");
  loadStories(*io_, *c_, "second", "vulkan:0");
  const GenerateResult reference = generate(*c_, kPrompt, 30).wait(io_->waitScope);
  generate(*c_, kPrompt, 30, nullptr, nullptr, 0 * kj::MILLISECONDS, "second").wait(io_->waitScope);
  loadStories(*io_, *c_, "third", "vulkan:0");
  EXPECT_TRUE(allOn(placement("third"), "vulkan:0"));
  EXPECT_TRUE(allOn(placement("second"), "vulkan:0"));
  EXPECT_TRUE(allOn(placement("stories"), "cpu:0")) << "the least recently used idle model is paged out";
  for (const char* model : {"stories", "second", "third"}) {
    EXPECT_EQ(generate(*c_, kPrompt, 30, nullptr, nullptr, 0 * kj::MILLISECONDS, model).wait(io_->waitScope).ids,
              reference.ids)
        << model;
  }
  const std::string log = daemon_->log();
  EXPECT_NE(log.find("paging stories out to cpu:0: vulkan:0 has"), std::string::npos) << log;
  EXPECT_EQ(log.find("out of memory"), std::string::npos) << log;
}

}  // namespace
}  // namespace jitllm::testing
