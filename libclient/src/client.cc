// The synchronous Client: each method sends one request on the thread's KJ event loop and waits
// for it there, running the caller's callbacks as the daemon's streaming calls arrive.
#include "jitllm/client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>

#include "jitllm/client_capnp.h"
#include "schema_convert.h"
#include "thread_event_loop.h"

namespace jitllm::client {

static_assert(kProtocolVersion == rpc::PROTOCOL_VERSION,
              "client.h's kProtocolVersion must follow the schema's protocolVersion");

const char* libraryVersion() { return JITLLM_CLIENT_VERSION; }

namespace {

// recentEvents(): replayed events may trail the events() return; once none has come for this
// long after it, the replay is taken as complete. Short enough for a CLI to feel instant, long
// enough for a loaded daemon's mailbox to flush.
constexpr auto kReplayQuietPeriod = 150 * kj::MILLISECONDS;

// State shared by a streaming call and the sink the daemon calls; the sink outlives the call
// (the daemon may still hold it), so it reaches the caller's callback only while `active`.
struct StreamState {
  const ChunkCallback* onChunk = nullptr;
  bool active = true;
  bool stopped = false;
  std::vector<int32_t> tokens;
  std::string text;
  std::exception_ptr callbackError;
  kj::Own<kj::PromiseFulfiller<void>> stop;

  void requestStop() {
    if (stopped) return;
    stopped = true;
    stop->fulfill();
  }
};

class TokenSinkServer final : public rpc::TokenSink::Server {
 public:
  explicit TokenSinkServer(std::shared_ptr<StreamState> state) : state_(std::move(state)) {}

  kj::Promise<void> tokens(TokensContext context) override {
    StreamState& s = *state_;
    if (!s.active || s.stopped) return kj::READY_NOW;
    auto params = context.getParams();
    const size_t first = s.tokens.size();
    for (int32_t id : params.getIds()) s.tokens.push_back(id);
    const auto text = params.getText();
    s.text.append(text.cStr(), text.size());
    if (s.onChunk != nullptr && *s.onChunk) {
      bool more = false;
      try {
        more = (*s.onChunk)(std::span<const int32_t>(s.tokens.data() + first, s.tokens.size() - first),
                            std::string_view(text.cStr(), text.size()));
      } catch (...) {
        s.callbackError = std::current_exception();
      }
      if (!more) s.requestStop();
    }
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<StreamState> state_;
};

struct ProgressState {
  const ProgressCallback* onProgress = nullptr;
  std::exception_ptr callbackError;
};

class ProgressSinkServer final : public rpc::ProgressSink::Server {
 public:
  explicit ProgressSinkServer(std::shared_ptr<ProgressState> state) : state_(std::move(state)) {}

  kj::Promise<void> progress(ProgressContext context) override {
    ProgressState& s = *state_;
    if (s.onProgress == nullptr || !*s.onProgress || s.callbackError) return kj::READY_NOW;
    auto p = context.getParams();
    try {
      (*s.onProgress)(LoadProgress{std::string(p.getStage().cStr(), p.getStage().size()), p.getDone(), p.getTotal()});
    } catch (...) {
      // A progress display failing is no reason to abandon a load; report it afterwards.
      s.callbackError = std::current_exception();
    }
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<ProgressState> state_;
};

struct EventState {
  const EventCallback* onEvent = nullptr;
  bool active = true;
  bool stopped = false;
  size_t received = 0;
  std::exception_ptr callbackError;
  kj::Own<kj::PromiseFulfiller<void>> stop;

  void requestStop() {
    if (stopped) return;
    stopped = true;
    stop->fulfill();
  }
};

class EventSinkServer final : public rpc::EventSink::Server {
 public:
  explicit EventSinkServer(std::shared_ptr<EventState> state) : state_(std::move(state)) {}

  kj::Promise<void> event(EventContext context) override {
    EventState& s = *state_;
    if (!s.active || s.stopped) return kj::READY_NOW;
    s.received++;
    bool more = false;
    try {
      more = (*s.onEvent)(convert::fromSchema(context.getParams().getEvent()));
    } catch (...) {
      s.callbackError = std::current_exception();
    }
    if (!more) s.requestStop();
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<EventState> state_;
};

kj::Exception disconnectedException(const std::string& socketPath) {
  return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                       kj::str("lost the connection to jitllmd at ", socketPath.c_str(),
                               " (it stopped, restarted or dropped this client)"));
}

}  // namespace

class Client::Impl final {
 public:
  Impl(std::shared_ptr<ThreadEventLoop> loop, kj::Own<DaemonConnection> connection)
      : loop_(std::move(loop)), connection_(kj::mv(connection)) {}

  ~Impl() {
    if (std::this_thread::get_id() != loop_->thread()) {
      // KJ objects may only be destroyed on their loop's thread; leaking beats corrupting it.
      std::fprintf(stderr, "jitllm::client::Client destroyed on another thread than its own: leaked\n");
      (void)new kj::Own<DaemonConnection>(kj::mv(connection_));
      (void)new std::shared_ptr<ThreadEventLoop>(std::move(loop_));
    }
  }

  ThreadEventLoop& loop() { return *loop_; }
  DaemonConnection& connection() { return *connection_; }
  rpc::Daemon::Client daemon() { return connection_->daemon(); }
  kj::WaitScope& waitScope() { return loop_->waitScope(); }

  // Runs one synchronous operation: on the right thread, not re-entered, KJ exceptions turned into
  // Errors that name the socket when the connection is what failed.
  template <typename F>
  auto run(F&& body) -> decltype(body()) {
    ThreadEventLoop::Busy busy(*loop_);
    // What a call leaves queued (a Finish for a dropped call, a Release for a dropped
    // subscription) must reach the daemon now, not whenever this thread next calls: the loop only
    // runs inside our methods.
    KJ_DEFER(flush());
    try {
      return body();
    } catch (const kj::Exception& e) {
      Error error = toError(e);
      // A connection that broke here (not a DISCONNECTED the daemon reported) names the socket.
      const bool local = !e.getDescription().startsWith("remote exception: ");
      if (error.kind() == ErrorKind::kDisconnected && local &&
          error.message().find(connection_->socketPath()) == std::string::npos) {
        throw Error(ErrorKind::kDisconnected,
                    "lost the connection to jitllmd at " + connection_->socketPath() +
                        " (it stopped, restarted or dropped this client): " + error.message());
      }
      throw error;
    }
  }

  // run() for a method added to protocol 1 after its first daemons: one of those answers with Cap'n
  // Proto's own "Method not implemented.", which would leave the user guessing.
  template <typename F>
  auto runNewer(const char* method, F&& body) -> decltype(body()) {
    try {
      return run(std::forward<F>(body));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnimplemented || e.message().rfind("Method not implemented.", 0) != 0) throw;
      throw Error(ErrorKind::kUnimplemented, "jitllmd at " + connection_->socketPath() + " does not implement " +
                                                 method + " (it is older than this client, libjitllmclient " +
                                                 libraryVersion() + "): use a jitllmd from the same release");
    }
  }

  void flush() noexcept {
    try {
      waitScope().poll();
    } catch (...) {
      // A connection that broke while flushing shows up in the next call.
    }
  }

  kj::Promise<void> disconnected() {
    return connection_->onDisconnect().then(
        [path = connection_->socketPath()]() -> kj::Promise<void> { return disconnectedException(path); });
  }

  template <typename Params, typename Results>
  GenerateResult stream(capnp::Request<Params, Results>&& request, std::shared_ptr<StreamState> state) {
    auto stopped = kj::newPromiseAndFulfiller<void>();
    state->stop = kj::mv(stopped.fulfiller);
    KJ_DEFER(state->active = false);  // late chunks (after a cancel or an error) reach no callback
    request.setSink(kj::heap<TokenSinkServer>(state));
    // Dropping the request's promise (when the callback stops) cancels the call in the daemon.
    auto outcome =
        request.send()
            .then([](capnp::Response<Results>&& r) -> kj::Maybe<capnp::Response<Results>> { return kj::mv(r); })
            .exclusiveJoin(stopped.promise.then([]() -> kj::Maybe<capnp::Response<Results>> { return nullptr; }));
    auto response = outcome.wait(waitScope());
    if (state->callbackError) std::rethrow_exception(state->callbackError);
    GenerateResult result;
    KJ_IF_MAYBE (r, response) {
      for (int32_t id : r->getTokens()) result.tokens.push_back(id);
      result.text.assign(r->getText().cStr(), r->getText().size());
      result.stats = convert::fromSchema(r->getStats());
    } else {
      result.cancelled = true;
      result.tokens = std::move(state->tokens);
      result.text = std::move(state->text);
      result.stats.generatedTokens = uint32_t(result.tokens.size());
      result.stats.stopReason = StopReason::kCancelled;
    }
    return result;
  }

  ModelInfo load(capnp::Request<rpc::Daemon::LoadParams, rpc::Daemon::LoadResults>&& request,
                 const LoadOptions& options, const ProgressCallback& progress) {
    convert::toSchema(options, request.initOptions());
    auto state = std::make_shared<ProgressState>();
    state->onProgress = &progress;
    if (progress) request.setProgress(kj::heap<ProgressSinkServer>(state));
    auto response = request.send().wait(waitScope());
    state->onProgress = nullptr;
    ModelInfo model = convert::fromSchema(response.getModel());
    if (state->callbackError) std::rethrow_exception(state->callbackError);
    return model;
  }

 private:
  std::shared_ptr<ThreadEventLoop> loop_;  // first: destroyed after the connection that uses it
  kj::Own<DaemonConnection> connection_;
};

Client Client::connect(const std::string& socketPath) {
  auto loop = ThreadEventLoop::forThisThread();
  auto connection = [&] {
    ThreadEventLoop::Busy busy(*loop);
    return DaemonConnection::connect(*loop->io().lowLevelProvider, socketPath);
  }();
  Client client(std::make_unique<Impl>(std::move(loop), kj::mv(connection)));
  const Version v = client.version();
  if (v.protocol != kProtocolVersion) {
    throw Error(ErrorKind::kFailed, "jitllmd at " + client.socketPath() + " speaks protocol " +
                                        std::to_string(v.protocol) + " but this client (libjitllmclient " +
                                        libraryVersion() + ") speaks " + std::to_string(kProtocolVersion) +
                                        ": use a jitllmctl and libjitllmclient from the same release as jitllmd");
  }
  return client;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

const std::string& Client::socketPath() const { return impl_->connection().socketPath(); }

Version Client::version() {
  return impl_->run([&] {
    auto response = impl_->daemon().versionRequest().send().wait(impl_->waitScope());
    return convert::fromSchema(response.getVersion());
  });
}

std::vector<DeviceInfo> Client::devices() {
  return impl_->run([&] {
    auto response = impl_->daemon().devicesRequest().send().wait(impl_->waitScope());
    std::vector<DeviceInfo> out;
    for (auto d : response.getDevices()) out.push_back(convert::fromSchema(d));
    return out;
  });
}

std::vector<ModelInfo> Client::models() {
  return impl_->run([&] {
    auto response = impl_->daemon().modelsRequest().send().wait(impl_->waitScope());
    std::vector<ModelInfo> out;
    for (auto m : response.getModels()) out.push_back(convert::fromSchema(m));
    return out;
  });
}

ModelInfo Client::load(const std::string& path, const LoadOptions& options, const ProgressCallback& progress) {
  return impl_->run([&] {
    auto request = impl_->daemon().loadRequest();
    if (options.sendPath) {
      // The daemon resolves nothing against its own working directory: send an absolute path.
      request.initSource().setPath(std::filesystem::absolute(path).lexically_normal().string());
    } else {
      kj::AutoCloseFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (fd.get() < 0) throw Error(ErrorKind::kFailed, "cannot open " + path + ": " + std::strerror(errno));
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        throw Error(ErrorKind::kFailed, path + " is not a regular file (give a .gguf model file)");
      }
      request.initSource().setFile(fileCapability(kj::mv(fd)));
    }
    return impl_->load(kj::mv(request), options, progress);
  });
}

ModelInfo Client::loadFd(int fd, const LoadOptions& options, const ProgressCallback& progress) {
  return impl_->run([&] {
    kj::AutoCloseFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (own.get() < 0)
      throw Error(ErrorKind::kFailed, "cannot use descriptor " + std::to_string(fd) + ": " + std::strerror(errno));
    auto request = impl_->daemon().loadRequest();
    request.initSource().setFile(fileCapability(kj::mv(own)));
    return impl_->load(kj::mv(request), options, progress);
  });
}

void Client::unload(const std::string& name) {
  impl_->run([&] {
    auto request = impl_->daemon().unloadRequest();
    request.setName(name);
    request.send().wait(impl_->waitScope());
  });
}

GenerateResult Client::generate(const GenerateRequest& request, const ChunkCallback& onChunk) {
  return impl_->run([&] {
    auto call = impl_->daemon().generateRequest();
    convert::toSchema(request, call.initRequest());
    auto state = std::make_shared<StreamState>();
    state->onChunk = &onChunk;
    return impl_->stream(kj::mv(call), state);
  });
}

GenerateResult Client::chat(const ChatRequest& request, const ChunkCallback& onChunk) {
  return impl_->run([&] {
    auto call = impl_->daemon().chatRequest();
    convert::toSchema(request, call.initRequest());
    auto state = std::make_shared<StreamState>();
    state->onChunk = &onChunk;
    return impl_->stream(kj::mv(call), state);
  });
}

void Client::events(const EventCallback& onEvent, uint32_t replay) {
  if (!onEvent) throw Error(ErrorKind::kFailed, "events() needs a callback");
  impl_->run([&] {
    auto stopped = kj::newPromiseAndFulfiller<void>();
    auto state = std::make_shared<EventState>();
    state->onEvent = &onEvent;
    state->stop = kj::mv(stopped.fulfiller);
    auto request = impl_->daemon().eventsRequest();
    request.setSink(kj::heap<EventSinkServer>(state));
    request.setReplay(replay);
    kj::Maybe<rpc::Subscription::Client> subscription;  // held until we return: dropping it unsubscribes
    auto subscribed = request.send().then([&subscription](capnp::Response<rpc::Daemon::EventsResults>&& r) {
      subscription = r.getSubscription();
      return kj::Promise<void>(kj::NEVER_DONE);
    });
    subscribed.exclusiveJoin(kj::mv(stopped.promise)).exclusiveJoin(impl_->disconnected()).wait(impl_->waitScope());
    state->active = false;
    if (state->callbackError) std::rethrow_exception(state->callbackError);
  });
}

std::vector<Event> Client::recentEvents(uint32_t max) {
  std::vector<Event> out;
  if (max == 0) return out;
  const EventCallback collect = [&](const Event& e) {
    out.push_back(e);
    return out.size() < max;
  };
  impl_->run([&] {
    auto stopped = kj::newPromiseAndFulfiller<void>();
    auto state = std::make_shared<EventState>();
    state->onEvent = &collect;
    state->stop = kj::mv(stopped.fulfiller);
    auto request = impl_->daemon().eventsRequest();
    request.setSink(kj::heap<EventSinkServer>(state));
    request.setReplay(max);
    auto stoppedForked = stopped.promise.fork();
    auto response = request.send()
                        .then([](capnp::Response<rpc::Daemon::EventsResults>&& r) {
                          return kj::Maybe<capnp::Response<rpc::Daemon::EventsResults>>(kj::mv(r));
                        })
                        .exclusiveJoin(stoppedForked.addBranch().then(
                            []() { return kj::Maybe<capnp::Response<rpc::Daemon::EventsResults>>(nullptr); }))
                        .wait(impl_->waitScope());
    auto& timer = impl_->loop().io().provider->getTimer();
    while (!state->stopped) {
      const size_t before = state->received;
      timer.afterDelay(kReplayQuietPeriod)
          .exclusiveJoin(stoppedForked.addBranch())
          .exclusiveJoin(impl_->disconnected())
          .wait(impl_->waitScope());
      if (state->received == before) break;
    }
    state->active = false;
    (void)response;  // the subscription it holds ends here
  });
  return out;
}

void Client::cancelSession(uint64_t sessionId) {
  impl_->run([&] {
    auto request = impl_->daemon().cancelSessionRequest();
    request.setSessionId(sessionId);
    request.send().wait(impl_->waitScope());
  });
}

MigrationStats Client::migrate(const MigrateRequest& request) {
  return impl_->runNewer("migrate", [&] {
    auto call = impl_->daemon().migrateRequest();
    convert::toSchema(request, call.initRequest());
    auto response = call.send().wait(impl_->waitScope());
    return convert::fromSchema(response.getStats());
  });
}

MigrationStats Client::tensorParallel(const TensorParallelRequest& request) {
  return impl_->runNewer("tensorParallel", [&] {
    auto call = impl_->daemon().tensorParallelRequest();
    convert::toSchema(request, call.initRequest());
    auto response = call.send().wait(impl_->waitScope());
    return convert::fromSchema(response.getStats());
  });
}

ModelInfo Client::replicate(const std::string& model, const std::string& device) {
  return impl_->runNewer("replicate", [&] {
    auto call = impl_->daemon().replicateRequest();
    call.setModel(model);
    call.setDevice(device);
    auto response = call.send().wait(impl_->waitScope());
    return convert::fromSchema(response.getModel());
  });
}

MigrationStats Client::pin(const std::string& model, const std::string& layers, const std::string& device) {
  return impl_->runNewer("pin", [&] {
    auto call = impl_->daemon().pinRequest();
    call.setModel(model);
    call.setLayers(layers);
    call.setDevice(device);
    auto response = call.send().wait(impl_->waitScope());
    return convert::fromSchema(response.getStats());
  });
}

void Client::unpin(const std::string& model, const std::string& layers) {
  impl_->runNewer("unpin", [&] {
    auto call = impl_->daemon().unpinRequest();
    call.setModel(model);
    call.setLayers(layers);
    call.send().wait(impl_->waitScope());
  });
}

PolicyInfo Client::policy(const std::string& name) {
  return impl_->runNewer("policy", [&] {
    auto call = impl_->daemon().policyRequest();
    call.setName(name);
    auto response = call.send().wait(impl_->waitScope());
    PolicyInfo info;
    info.name = response.getName();
    for (auto n : response.getAvailable()) info.available.emplace_back(n);
    return info;
  });
}

CapnpAccess capnpAccess(Client& client) {
  auto& impl = *client.impl_;
  return CapnpAccess{impl.loop().io(), impl.waitScope(), impl.connection(), impl.daemon()};
}

}  // namespace jitllm::client
