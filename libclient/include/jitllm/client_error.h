// The one exception type the jitllm client library throws.
//
// kind() says what a caller can do about it, as the daemon's Cap'n Proto exceptions do:
//   kFailed         the request was wrong (unknown model, bad parameters, permission denied):
//                   message() says what to fix; retrying the same request fails again.
//   kOverloaded     no memory or capacity now (too many sessions, device memory full): retry later.
//   kDisconnected   the daemon is not running, went away, or a device vanished: reconnect.
//   kUnimplemented  this daemon cannot do it (an older daemon, a backend not built in).
// message() is the daemon's own message without Cap'n Proto's "remote exception: " prefix, or the
// library's (e.g. "jitllmd is not running (no socket at ...): start it with ...").
//
// Thread-safety: a value.
#pragma once

#include <stdexcept>
#include <string>

#include "jitllm/client_export.h"

namespace jitllm::client {

enum class ErrorKind { kFailed, kOverloaded, kDisconnected, kUnimplemented };

JITLLM_CLIENT_API const char* errorKindName(ErrorKind kind);  // "failed", "overloaded", ...

class JITLLM_CLIENT_API Error final : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}

  ErrorKind kind() const { return kind_; }
  std::string message() const { return what(); }

 private:
  ErrorKind kind_;
};

}  // namespace jitllm::client
