// libFuzzer target: the daemon's RPC surface. Each input is one call of the Daemon interface with
// parameters decoded from the fuzzer's bytes, made on a real DaemonService over a real DaemonCore
// serving stories260K on cpu:0:
//
//   byte 0      the method (taken modulo the method count)
//   byte 1      bit 0: the caller is an admin (uid 0) rather than an ordinary user
//   bytes 2...  a Cap'n Proto message (unpacked, segment table first): the method's parameters
//
// Anything may be refused - a decode error of the bytes, an Error from the daemon turned into a
// Cap'n Proto exception - but a crash, a sanitizer report, a leak, a hang past libFuzzer's
// timeout, or a daemon that stops serving is a bug: after every input the model must still
// generate the reply it gave before the first. Generations are capped at a few tokens so inputs
// stay fast (the cap changes the request's numbers, never its shape).
//
// `rpc_fuzz --write-seeds DIR` writes a seed corpus of valid calls (tests/fuzz/corpus/rpc holds it).
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"
#include "daemon/server/rpc_service.h"
#include "jitllm/jitllm.capnp.h"

namespace {

using namespace jitllm;
using server::DaemonConfig;
using server::DaemonCore;

constexpr uint32_t kMaxTokens = 4;     // per fuzzed generation
constexpr uint32_t kMaxContext = 256;  // per fuzzed session
constexpr const char* kModel = "stories";

// Takes a reply's tokens and acknowledges them at once.
class Sink final : public rpc::TokenSink::Server {
 public:
  kj::Promise<void> tokens(TokensContext) override { return kj::READY_NOW; }
};

class EventSink final : public rpc::EventSink::Server {
 public:
  kj::Promise<void> event(EventContext) override { return kj::READY_NOW; }
};

class ProgressSink final : public rpc::ProgressSink::Server {
 public:
  kj::Promise<void> progress(ProgressContext) override { return kj::READY_NOW; }
};

struct World {
  World() {
    spdlog::set_level(spdlog::level::err);  // the daemon's log would drown libFuzzer's
    DaemonConfig config;
    config.devices = "cpu:0";
    config.cpuThreads = 1;
    config.speedProbe = false;
    config.schedulerIntervalMs = 0;
    config.rescanIntervalMs = 0;
    config.logLevel = "error";
    config.modelDirs = {std::string(JITLLM_SHARED_DIR) + "/models"};
    config.idleSessions = 1;
    core = std::make_unique<DaemonCore>(config);
    ensureModel();
  }

  void ensureModel() {
    try {
      core->find(kModel);
      return;
    } catch (const Error&) {
    }
    server::LoadRequest r;
    r.path = std::string(JITLLM_SHARED_DIR) + "/models/stories260K.gguf";
    r.name = kModel;
    core->load(r, nullptr);
  }

  std::vector<int32_t> probe(kj::WaitScope& ws) {
    rpc::Daemon::Client admin = kj::heap<server::DaemonService>(*core, background, wakeups, server::PeerCredentials{0, 0});
    auto req = admin.generateRequest();
    req.initRequest().setModel(kModel);
    req.getRequest().initPrompt().setText("Once upon a time");
    req.getRequest().setMaxTokens(kMaxTokens);
    req.setSink(kj::heap<Sink>());
    auto resp = req.send().wait(ws);
    std::vector<int32_t> ids;
    for (int32_t id : resp.getTokens()) ids.push_back(id);
    return ids;
  }

  kj::AsyncIoContext io = kj::setupAsyncIo();
  server::ReplyWakeups wakeups;  // after io: it lives on io's event loop
  server::BackgroundThreads background;
  std::unique_ptr<DaemonCore> core;
  std::vector<int32_t> expected;
};

World& world() {
  static World* w = [] {
    auto* made = new World();
    made->expected = made->probe(made->io.waitScope);
    return made;
  }();
  return *w;
}

template <typename Params>
void clampGeneration(Params r) {
  if (r.getMaxTokens() > kMaxTokens) r.setMaxTokens(kMaxTokens);
  if (r.getContextSize() > kMaxContext || r.getContextSize() == 0) r.setContextSize(kMaxContext);
}

// Makes the call the bytes describe and waits for its outcome (a result or an exception).
void call(rpc::Daemon::Client& d, uint8_t method, capnp::AnyPointer::Reader params, kj::WaitScope& ws) {
  auto run = [&](auto&& request) { request.send().ignoreResult().wait(ws); };
  switch (method % 13) {
    case 0:
      run(d.versionRequest());
      break;
    case 1:
      run(d.devicesRequest());
      break;
    case 2:
      run(d.modelsRequest());
      break;
    case 3: {
      // A path source only (descriptors cannot come from bytes): the options' name field carries
      // it, and the model takes its name from the file.
      auto req = d.loadRequest();
      auto options = params.getAs<rpc::LoadOptions>();
      req.setOptions(options);
      req.initSource().setPath(options.getName());
      req.getOptions().setName("");
      req.setProgress(kj::heap<ProgressSink>());
      run(kj::mv(req));
      break;
    }
    case 4:
      run([&] {
        auto req = d.unloadRequest();
        req.setName(params.getAs<capnp::Text>());
        return req;
      }());
      break;
    case 5: {
      auto req = d.generateRequest();
      req.setRequest(params.getAs<rpc::GenerateRequest>());
      clampGeneration(req.getRequest());
      req.setSink(kj::heap<Sink>());
      run(kj::mv(req));
      break;
    }
    case 6: {
      auto req = d.chatRequest();
      req.setRequest(params.getAs<rpc::ChatRequest>());
      clampGeneration(req.getRequest());
      req.setSink(kj::heap<Sink>());
      run(kj::mv(req));
      break;
    }
    case 7: {
      auto req = d.eventsRequest();
      req.setSink(kj::heap<EventSink>());
      req.setReplay(params.getAs<capnp::Text>().size());
      req.send().wait(ws);  // the subscription ends with the response
      break;
    }
    case 8:
      run([&] {
        auto req = d.cancelSessionRequest();
        req.setSessionId(params.getAs<capnp::Text>().size());
        return req;
      }());
      break;
    case 9: {
      auto req = d.migrateRequest();
      req.setRequest(params.getAs<rpc::MigrateRequest>());
      run(kj::mv(req));
      break;
    }
    case 10: {
      auto m = params.getAs<rpc::MigrateRequest>();
      auto req = d.pinRequest();
      req.setModel(m.getModel());
      req.setLayers(m.getLayers());
      req.setDevice(m.getDevice());
      run(kj::mv(req));
      break;
    }
    case 11: {
      auto m = params.getAs<rpc::MigrateRequest>();
      auto req = d.unpinRequest();
      req.setModel(m.getModel());
      req.setLayers(m.getLayers());
      run(kj::mv(req));
      break;
    }
    default:
      run([&] {
        auto req = d.policyRequest();
        req.setName(params.getAs<capnp::Text>());
        return req;
      }());
      break;
  }
}

// A valid call of `method` with `fill`ed parameters, as the fuzzer reads it.
template <typename Root, typename Fill>
std::vector<uint8_t> seed(uint8_t method, uint8_t flags, Fill fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<Root>());
  const auto words = capnp::messageToFlatArray(message);
  std::vector<uint8_t> out = {method, flags};
  const auto bytes = words.asBytes();
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

std::vector<uint8_t> seedText(uint8_t method, uint8_t flags, const char* text) {
  capnp::MallocMessageBuilder message;
  message.getRoot<capnp::AnyPointer>().setAs<capnp::Text>(text);
  const auto words = capnp::messageToFlatArray(message);
  std::vector<uint8_t> out = {method, flags};
  const auto bytes = words.asBytes();
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

int writeSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::vector<uint8_t>> seeds;
  for (uint8_t m : {0, 1, 2}) seeds.push_back(seedText(m, 0, ""));
  seeds.push_back(seedText(4, 1, "no-such-model"));
  seeds.push_back(seedText(7, 0, "replay a few"));
  seeds.push_back(seedText(8, 0, "x"));
  seeds.push_back(seed<rpc::GenerateRequest>(5, 0, [](rpc::GenerateRequest::Builder r) {
    r.setModel(kModel);
    r.initPrompt().setText("Once upon a time");
    r.setMaxTokens(3);
    r.initStop(1).set(0, ".");
  }));
  seeds.push_back(seed<rpc::GenerateRequest>(5, 1, [](rpc::GenerateRequest::Builder r) {
    r.setModel(kModel);
    auto t = r.initPrompt().initTokens(3);
    t.set(0, 1);
    t.set(1, 400);
    t.set(2, 77);
    r.initSampling().setTemperature(0.8f);
    r.getSampling().setSeed(7);
  }));
  seeds.push_back(seed<rpc::ChatRequest>(6, 0, [](rpc::ChatRequest::Builder r) {
    r.setModel(kModel);
    auto m = r.initMessages(2);
    m[0].setRole("system");
    m[0].setContent("Be brief.");
    m[1].setRole("user");
    m[1].setContent("Tell a story");
  }));
  seeds.push_back(seed<rpc::MigrateRequest>(9, 1, [](rpc::MigrateRequest::Builder r) {
    r.setModel(kModel);
    r.setLayers("1-2");
    r.setDevice("cpu:0");
  }));
  seeds.push_back(seed<rpc::MigrateRequest>(10, 1, [](rpc::MigrateRequest::Builder r) {
    r.setModel(kModel);
    r.setLayers("output");
    r.setDevice("cpu:0");
  }));
  seeds.push_back(seed<rpc::LoadOptions>(3, 1, [](rpc::LoadOptions::Builder r) {
    r.setName(std::string(JITLLM_SHARED_DIR) + "/models/stories260K.gguf");
    r.initDevices(1).set(0, "cpu:0");
    r.setKvPrecision(rpc::KvPrecision::F16);
  }));
  seeds.push_back(seedText(12, 1, "thermal"));
  for (size_t i = 0; i < seeds.size(); i++) {
    std::ofstream(dir + "/seed-" + std::to_string(i), std::ios::binary)
        .write(reinterpret_cast<const char*>(seeds[i].data()), std::streamsize(seeds[i].size()));
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i + 1 < *argc; i++) {
    if (std::strcmp((*argv)[i], "--write-seeds") == 0) std::exit(writeSeeds((*argv)[i + 1]));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  World& w = world();
  const uint8_t method = data[0];
  const bool admin = data[1] & 1;
  // Word-aligned copy of the message bytes (a trailing partial word is dropped).
  std::vector<capnp::word> words((size - 2) / sizeof(capnp::word));
  if (!words.empty()) std::memcpy(words.data(), data + 2, words.size() * sizeof(capnp::word));
  rpc::Daemon::Client d =
      kj::heap<server::DaemonService>(*w.core, w.background, w.wakeups, server::PeerCredentials{admin ? 0u : 12345u, 1});
  try {
    capnp::ReaderOptions limits;
    limits.traversalLimitInWords = 1 << 16;
    limits.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()), limits);
    call(d, method, reader.getRoot<capnp::AnyPointer>(), w.io.waitScope);
  } catch (const kj::Exception&) {
    // Refused: a decode error, or the daemon's answer to a bad request.
  }
  // Whatever the call did (an unload, a migration), the daemon must still serve: the model is
  // brought back if it went, and it must give the reply it gave before the first input.
  w.ensureModel();
  if (w.probe(w.io.waitScope) != w.expected) {
    std::fprintf(stderr, "rpc_fuzz: the model's reply changed after this input\n");
    std::abort();
  }
  return 0;
}
