// The socket rule of socket_path.h.
#include "jitllm/socket_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace jitllm::client {

std::string userSocketPath(const char* xdgRuntimeDir, unsigned uid) {
  if (xdgRuntimeDir != nullptr && *xdgRuntimeDir != '\0') return std::string(xdgRuntimeDir) + "/jitllm/jitllmd.sock";
  // Where a user's jitllmd listens when the session has no runtime directory (su, cron, ssh -T).
  return "/tmp/jitllm-" + std::to_string(uid) + "/jitllmd.sock";
}

std::string resolveSocketPath(const SocketPathInputs& inputs) {
  if (!inputs.explicitPath.empty()) return inputs.explicitPath;
  if (inputs.socketEnv != nullptr && *inputs.socketEnv != '\0') return inputs.socketEnv;
  const std::string user = userSocketPath(inputs.xdgRuntimeDir, inputs.uid);
  if (inputs.socketExists && inputs.socketExists(user)) return user;
  return kSystemSocketPath;
}

std::string defaultSocketPath(const std::string& explicitPath) {
  SocketPathInputs inputs;
  inputs.explicitPath = explicitPath;
  inputs.socketEnv = std::getenv(kSocketEnvironmentVariable);
  inputs.xdgRuntimeDir = std::getenv("XDG_RUNTIME_DIR");
  inputs.uid = ::getuid();
  inputs.socketExists = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  };
  return resolveSocketPath(inputs);
}

std::string notRunningMessage(const std::string& socketPath) {
  return "jitllmd is not running (no socket at " + socketPath +
         "): start it with `systemctl start jitllmd` or `jitllmd`";
}

}  // namespace jitllm::client
