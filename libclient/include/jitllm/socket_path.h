// Where a client looks for jitllmd's socket.
//
// The rule, first match wins:
//   1. an explicit path (jitllmctl --socket PATH, Client::connect(path));
//   2. $JITLLM_SOCKET when set and not empty;
//   3. the calling user's own daemon, if that socket exists: $XDG_RUNTIME_DIR/jitllm/jitllmd.sock
//      ($XDG_RUNTIME_DIR unset: /tmp/jitllm-UID/jitllmd.sock, where a user's jitllmd then listens);
//   4. the system service's /run/jitllm/jitllmd.sock.
// Step 3 lets a user who runs their own jitllmd reach it without flags while everyone else gets
// the system daemon.
//
// Thread-safety: resolveSocketPath is pure; defaultSocketPath reads the environment.
#pragma once

#include <functional>
#include <string>

#include "jitllm/client_export.h"

namespace jitllm::client {

inline constexpr const char* kSystemSocketPath = "/run/jitllm/jitllmd.sock";
inline constexpr const char* kSocketEnvironmentVariable = "JITLLM_SOCKET";

struct SocketPathInputs {
  std::string explicitPath;    // empty: none given
  const char* socketEnv = nullptr;  // $JITLLM_SOCKET, nullptr when unset
  const char* xdgRuntimeDir = nullptr;  // $XDG_RUNTIME_DIR, nullptr when unset
  unsigned uid = 0;            // for the /tmp fallback of step 3
  std::function<bool(const std::string&)> socketExists;  // true if a socket file is there
};

// The rule above as a pure function of its inputs.
JITLLM_CLIENT_API std::string resolveSocketPath(const SocketPathInputs& inputs);

// The user's own daemon socket (step 3's path), whether or not it exists.
JITLLM_CLIENT_API std::string userSocketPath(const char* xdgRuntimeDir, unsigned uid);

// The rule applied to this process: its environment, its uid and the file system.
JITLLM_CLIENT_API std::string defaultSocketPath(const std::string& explicitPath = {});

// "jitllmd is not running (no socket at PATH): start it with `systemctl start jitllmd` or
// `jitllmd`" - the message of the Error(kDisconnected) connect() throws when nobody listens.
JITLLM_CLIENT_API std::string notRunningMessage(const std::string& socketPath);

}  // namespace jitllm::client
