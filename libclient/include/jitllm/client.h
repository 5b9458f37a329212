// jitllm client: a synchronous C++ API to jitllmd over its Unix socket.
//
//   #include <jitllm/client.h>
//   auto client = jitllm::client::Client::connect();          // the default socket rule
//   jitllm::client::GenerateRequest req;
//   req.model = "stories";
//   req.prompt = "Once upon a time";
//   auto result = client.generate(req, [](std::span<const int32_t>, std::string_view text) {
//     std::cout << text << std::flush;
//     return true;                                             // false stops the generation
//   });
//
// Every method blocks until the daemon answers and throws jitllm::client::Error (client_error.h)
// on failure. Callbacks run on the calling thread, inside the method that was given them, while
// it waits; they must not call back into the same Client (that throws Error(kFailed)).
//
// This header hides Cap'n Proto and KJ; jitllm/client_capnp.h gives their objects to programs
// that want the asynchronous API (pipelining, several calls in flight, their own event loop).
//
// Thread-safety: a Client belongs to the thread that connected it: call it and destroy it there
// (it runs a KJ event loop, which is per thread; Clients on one thread share that loop, so a
// thread may hold several). Use one Client per thread to talk to the daemon from several threads.
// A thread that already runs its own KJ event loop uses DaemonConnection from client_capnp.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jitllm/client_error.h"
#include "jitllm/client_export.h"
#include "jitllm/client_types.h"
#include "jitllm/socket_path.h"

namespace jitllm::client {

// The protocol this library speaks (jitllm::rpc::PROTOCOL_VERSION in the schema it was built from).
inline constexpr uint32_t kProtocolVersion = 2;

// The library's own version, "MAJOR.MINOR.PATCH".
JITLLM_CLIENT_API const char* libraryVersion();

// Receives a reply as it streams: the new token ids and their text (whole UTF-8 characters; empty
// while a character's bytes are incomplete). Return false to stop the generation.
using ChunkCallback = std::function<bool(std::span<const int32_t> ids, std::string_view text)>;
using ProgressCallback = std::function<void(const LoadProgress& progress)>;
// Return false to stop listening.
using EventCallback = std::function<bool(const Event& event)>;

struct CapnpAccess;  // jitllm/client_capnp.h

class JITLLM_CLIENT_API Client final {
 public:
  // Connects to jitllmd. `socketPath` empty: the default rule (socket_path.h). Throws
  // Error(kDisconnected) with notRunningMessage() when nobody listens there, Error(kFailed) when
  // the socket may not be opened (with what to do) or the daemon speaks another protocol version.
  static Client connect(const std::string& socketPath = {});

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // The socket this client is connected to.
  const std::string& socketPath() const;

  // The daemon's version and protocol.
  Version version();
  // The devices the daemon owns, with memory and telemetry.
  std::vector<DeviceInfo> devices();
  // The resident models with their placement, memory and sessions. Non-admins see only their own
  // sessions.
  std::vector<ModelInfo> models();

  // Loads a model (admin only). The client opens `path` itself and passes the descriptor, unless
  // options.sendPath asks to send the path for the daemon to open. `progress` (optional) is
  // called as the daemon reports stages. Returns the loaded model.
  ModelInfo load(const std::string& path, const LoadOptions& options = {}, const ProgressCallback& progress = {});
  // Loads from a descriptor the caller opened; the caller keeps `fd` (it is duplicated).
  ModelInfo loadFd(int fd, const LoadOptions& options = {}, const ProgressCallback& progress = {});
  // Unloads a model (admin only); its running sessions end with Error(kDisconnected).
  void unload(const std::string& name);

  // Generates from a prompt, streaming chunks to `onChunk` (optional). Returns every generated
  // token, the text and the daemon's stats, or (when onChunk returned false) what had arrived with
  // cancelled = true. An exception thrown by onChunk cancels the generation and is rethrown.
  GenerateResult generate(const GenerateRequest& request, const ChunkCallback& onChunk = {});
  // The same for a conversation, formatted with the model's chat template.
  GenerateResult chat(const ChatRequest& request, const ChunkCallback& onChunk = {});

  // Calls onEvent for up to `replay` recent events, then for each new one, until onEvent returns
  // false (then returns) or the daemon goes away (then throws Error(kDisconnected)).
  void events(const EventCallback& onEvent, uint32_t replay = 0);
  // Up to `max` recent events, without waiting for new ones.
  std::vector<Event> recentEvents(uint32_t max);

  // Cancels a running session (its owner, or an admin, may).
  void cancelSession(uint64_t sessionId);

  // Moves request.layers of a model to request.device while its sessions keep generating (admin
  // only). With request.wait (the default) returns once the move is committed, with its stats;
  // without, returns at once (committed false) and the outcome arrives as events ("migration.*").
  // Throws Error(kFailed) for an unknown model, device or range, a unit pinned elsewhere (unless
  // request.force), a migration of the model already running, or a non-admin; Error(kOverloaded)
  // when the target lacks memory. The model keeps running where it was after any error.
  MigrationStats migrate(const MigrateRequest& request);
  // Splits a range of a model's blocks over request.devices (tensor parallelism), or joins them
  // back onto one device, live (admin only). `to` in the stats names the split ("cuda:0+cuda:1").
  // Errors as migrate(), and kFailed when the model's heads do not split over that many devices.
  MigrationStats tensorParallel(const TensorParallelRequest& request);
  // A replica of `model` on `device` (data parallelism; admin only): returns it (named MODEL#2,
  // ...). Requests for `model` are then shared between the copies; unload("MODEL#2") drops it.
  ModelInfo replicate(const std::string& model, const std::string& device);
  // Pins a model's `layers` (MigrateRequest::layers syntax; empty: every unit) to `device`, first
  // moving those that are elsewhere (admin only). Returns that move's stats: units 0 when nothing
  // had to move. Pinned units never move on their own. Errors as migrate().
  MigrationStats pin(const std::string& model, const std::string& layers, const std::string& device);
  // Lifts the pins of a model's `layers` (empty: every unit) (admin only).
  void unpin(const std::string& model, const std::string& layers);

  // The scheduler's policy: with `name` empty, which is active; otherwise switch to it (admin).
  // Error(kUnimplemented) when the daemon runs without a scheduler.
  PolicyInfo policy(const std::string& name = {});

 private:
  class Impl;
  friend CapnpAccess capnpAccess(Client& client);

  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace jitllm::client
