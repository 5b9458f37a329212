// Calls the daemon tests make over raw Cap'n Proto: load stories260K, generate with a collecting
// (optionally slow) sink, collect events, poll until idle, read an error.
#pragma once

#include <gtest/gtest.h>

#include <set>

#include "base/device_id.h"
#include "tests/daemon/daemon_harness.h"

namespace jitllm::testing {

struct GenerateResult {
  std::vector<int32_t> streamedIds, ids;
  std::string streamedText, text;
  rpc::GenerationStats::Reader stats;
  uint32_t generated = 0;
  double ttftMs = 0;
  uint64_t session = 0;
};

inline void loadStories(kj::AsyncIoContext& io, RpcConnection& c, const std::string& name = "stories",
                        const std::string& devices = "") {
  auto req = c.daemon().loadRequest();
  const int fd = ::open(sharedPath("models/stories260K.gguf").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  req.initSource().setFile(kj::heap<FdFile>(fd));
  req.initOptions().setName(name);
  if (!devices.empty()) {
    const std::vector<DeviceRequest> list = parseDeviceList(devices);
    auto ids = req.getOptions().initDevices(uint32_t(list.size()));
    for (size_t i = 0; i < list.size(); i++) ids.set(uint32_t(i), list[i].id.str());
  }
  auto resp = req.send().wait(io.waitScope);
  EXPECT_EQ(std::string(resp.getModel().getName().cStr()), name);
  EXPECT_EQ(resp.getModel().getLayers(), 5u);
}

inline kj::Promise<GenerateResult> generate(RpcConnection& c, const std::string& prompt, uint32_t n,
                                            std::shared_ptr<CollectingSink::State> state = nullptr,
                                            kj::Timer* timer = nullptr, kj::Duration delay = 0 * kj::MILLISECONDS,
                                            const std::string& model = "stories") {
  if (!state) state = std::make_shared<CollectingSink::State>();
  auto req = c.daemon().generateRequest();
  auto r = req.initRequest();
  r.setModel(model);
  r.initPrompt().setText(prompt);
  r.setMaxTokens(n);
  req.setSink(kj::heap<CollectingSink>(state, timer, delay));
  return req.send().then([state](capnp::Response<rpc::Daemon::GenerateResults>&& resp) {
    GenerateResult out;
    out.streamedIds = state->ids;
    out.streamedText = state->text;
    for (int32_t id : resp.getTokens()) out.ids.push_back(id);
    out.text = resp.getText();
    out.generated = resp.getStats().getGeneratedTokens();
    out.ttftMs = resp.getStats().getTimeToFirstTokenMs();
    out.session = resp.getStats().getSessionId();
    return out;
  });
}

inline std::string errorOf(kj::Promise<void>&& p, kj::WaitScope& ws) {
  try {
    p.wait(ws);
  } catch (const kj::Exception& e) {
    return e.getDescription().cStr();
  }
  return "(no error)";
}

// Sessions and KV bytes the daemon reports for a model.
inline std::pair<size_t, uint64_t> sessionsAndKv(kj::AsyncIoContext& io, RpcConnection& c) {
  auto resp = c.daemon().modelsRequest().send().wait(io.waitScope);
  size_t sessions = 0;
  uint64_t kv = 0;
  for (auto m : resp.getModels()) {
    sessions += m.getSessions().size();
    for (auto d : m.getMemory()) kv += d.getKvBytes();
  }
  return {sessions, kv};
}

// No session runs, and every KV page in use belongs to an idle session (a finished reply kept for a
// follow-up, at most `maxIdle` per model): nothing else holds device memory.
inline bool onlyIdleSessionsHoldKv(kj::AsyncIoContext& io, RpcConnection& c, size_t maxIdle) {
  auto resp = c.daemon().modelsRequest().send().wait(io.waitScope);
  for (auto m : resp.getModels()) {
    if (m.getSessions().size() != 0 || m.getIdleSessions().size() > maxIdle) return false;
    std::set<uint64_t> idle;
    for (auto s : m.getIdleSessions()) idle.insert(s.getId());
    uint64_t pages = 0, pageBytes = 0;
    for (auto l : m.getLayerStates()) {
      for (auto s : l.getSessions()) {
        if (s.getPages() > 0 && !idle.count(s.getSessionId())) return false;
      }
      pages += l.getKvPages();
      if (l.getKvPages()) pageBytes = l.getKvBytes() / l.getKvPages();
    }
    uint64_t kv = 0;
    for (auto d : m.getMemory()) kv += d.getKvBytes();
    if (kv != pages * pageBytes) return false;
  }
  return true;
}

// Polls (bounded) until the daemon reports no sessions and no KV pages in use but idle sessions'
// (jitllmd's default idle_sessions = 4 per model).
inline bool becomesIdle(kj::AsyncIoContext& io, RpcConnection& c, size_t maxIdle = 4) {
  const auto deadline = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(30));
  while (std::chrono::steady_clock::now() < deadline) {
    if (onlyIdleSessionsHoldKv(io, c, maxIdle)) return true;
    io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(io.waitScope);
  }
  return false;
}

class EventCollector final : public rpc::EventSink::Server {
 public:
  explicit EventCollector(std::shared_ptr<std::vector<std::string>> seen) : seen_(std::move(seen)) {}
  kj::Promise<void> event(EventContext context) override {
    auto e = context.getParams().getEvent();
    seen_->push_back(std::string(e.getWhat().cStr()) + " " + e.getModel().cStr());
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<std::vector<std::string>> seen_;
};

}  // namespace jitllm::testing
