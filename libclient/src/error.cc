// Error kinds, and the translation of Cap'n Proto exceptions into them.
#include <kj/exception.h>

#include <string>

#include "jitllm/client_capnp.h"
#include "jitllm/client_error.h"

namespace jitllm::client {

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kFailed: return "failed";
    case ErrorKind::kOverloaded: return "overloaded";
    case ErrorKind::kDisconnected: return "disconnected";
    case ErrorKind::kUnimplemented: return "unimplemented";
  }
  return "failed";
}

Error toError(const kj::Exception& exception) {
  ErrorKind kind = ErrorKind::kFailed;
  switch (exception.getType()) {
    case kj::Exception::Type::FAILED: kind = ErrorKind::kFailed; break;
    case kj::Exception::Type::OVERLOADED: kind = ErrorKind::kOverloaded; break;
    case kj::Exception::Type::DISCONNECTED: kind = ErrorKind::kDisconnected; break;
    case kj::Exception::Type::UNIMPLEMENTED: kind = ErrorKind::kUnimplemented; break;
  }
  std::string message(exception.getDescription().cStr());
  // Cap'n Proto marks what the peer threw; the daemon's own words are what a user needs.
  static constexpr std::string_view kRemotePrefix = "remote exception: ";
  if (message.compare(0, kRemotePrefix.size(), kRemotePrefix) == 0) message.erase(0, kRemotePrefix.size());
  if (message.empty()) message = std::string("jitllmd reported an error of kind ") + errorKindName(kind);
  return Error(kind, message);
}

}  // namespace jitllm::client
