#include "base/error.h"

namespace jitllm {

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kFailed: return "FAILED";
    case ErrorKind::kOverloaded: return "OVERLOADED";
    case ErrorKind::kDisconnected: return "DISCONNECTED";
    case ErrorKind::kUnimplemented: return "UNIMPLEMENTED";
  }
  return "UNKNOWN";
}

void throwError(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace jitllm
