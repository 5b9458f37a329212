// The Cap'n Proto side of the jitllm client, for programs that want more than the synchronous API
// of jitllm/client.h: pipelined or concurrent calls, their own KJ event loop, or methods of the
// schema (jitllm/jitllm.capnp.h, namespace jitllm::rpc) that the plain API does not wrap.
//
// Including this header needs Cap'n Proto's headers and linking its libraries (kj, kj-async,
// capnp, capnp-rpc): CMake `jitllm::client_capnp`, or pkg-config `jitllm-client capnp-rpc`.
//
// Thread-safety: everything here belongs to the thread whose event loop it was made on.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/io.h>

#include <string>

#include "jitllm/client.h"
#include "jitllm/jitllm.capnp.h"

namespace jitllm::client {

// A connection to jitllmd on an event loop the caller runs (kj::setupAsyncIo() or its own). It
// owns the socket and the RPC system; the Daemon capability and everything obtained through it
// stop working (DISCONNECTED) when it is destroyed.
class JITLLM_CLIENT_API DaemonConnection final {
 public:
  // Connects now (a Unix socket connects at once or fails). `socketPath` empty: the default rule
  // of socket_path.h. Throws Error as Client::connect does; does not check the protocol version
  // (compare daemon().versionRequest() with rpc::PROTOCOL_VERSION if it matters).
  static kj::Own<DaemonConnection> connect(kj::LowLevelAsyncIoProvider& provider,
                                           const std::string& socketPath = {});

  DaemonConnection(std::string socketPath, kj::Own<kj::AsyncCapabilityStream> stream);
  ~DaemonConnection();
  KJ_DISALLOW_COPY(DaemonConnection);

  rpc::Daemon::Client daemon() { return daemon_; }
  // Resolves when the daemon closes the connection (it stopped, crashed or dropped us).
  kj::Promise<void> onDisconnect() { return rpc_.onDisconnect(); }
  const std::string& socketPath() const { return socketPath_; }

 private:
  std::string socketPath_;
  kj::Own<kj::AsyncCapabilityStream> stream_;
  capnp::TwoPartyClient rpc_;
  rpc::Daemon::Client daemon_;
};

// The File capability that ModelSource.file wants: it carries `fd` (owned from now on) to the
// daemon with the message (SCM_RIGHTS).
JITLLM_CLIENT_API rpc::File::Client fileCapability(kj::AutoCloseFd fd);

// The library's Error for an exception from a daemon call: the kind from its type, the daemon's
// message without "remote exception: ".
JITLLM_CLIENT_API Error toError(const kj::Exception& exception);

// The KJ objects behind a synchronous Client: its thread's event loop and its connection. Valid
// while the Client lives; use them on the Client's thread, outside its callbacks.
struct CapnpAccess {
  kj::AsyncIoContext& io;
  kj::WaitScope& waitScope;
  DaemonConnection& connection;
  rpc::Daemon::Client daemon;
};
JITLLM_CLIENT_API CapnpAccess capnpAccess(Client& client);

}  // namespace jitllm::client
