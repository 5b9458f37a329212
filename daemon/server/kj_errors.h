// Converts between jitllm::Error and kj::Exception, for the RPC layer only.
//
// Inside the daemon, failures are jitllm::Error; on the wire they are Cap'n Proto exceptions,
// whose types carry the same meaning (FAILED, OVERLOADED, DISCONNECTED, UNIMPLEMENTED).
//
// Thread-safety: pure functions.
#pragma once

#include <kj/async.h>
#include <kj/exception.h>

#include <exception>
#include <functional>

#include "base/error.h"

namespace jitllm::server {

kj::Exception toKjException(const Error& e);
// The current exception (inside a catch block) as a kj::Exception.
kj::Exception currentAsKjException();

// Runs `fn`, turning a thrown jitllm::Error or std::exception into a kj::Exception of the right
// type, so RPC methods can call into the daemon core directly.
template <typename Fn>
auto translateErrors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const kj::Exception&) {
    throw;
  } catch (...) {
    kj::throwFatalException(currentAsKjException());
  }
}

}  // namespace jitllm::server
