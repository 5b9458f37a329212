// Errors that mean something to a caller.
//
// jitllm reports failures as exceptions of one type, jitllm::Error, whose kind tells a caller
// what it can do about it (the KJ habit): FAILED for bad input or a broken invariant, OVERLOADED
// for "no memory or capacity now, try later", DISCONNECTED for "the device or peer went away",
// UNIMPLEMENTED for a valid request this build cannot serve. Messages name the thing at fault
// (file, tensor, key) so that a log line alone is enough to act on.
//
// Thread-safety: the types here are values; throwing is safe from any thread.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace jitllm {

enum class ErrorKind { kFailed, kOverloaded, kDisconnected, kUnimplemented };

const char* errorKindName(ErrorKind kind);

class Error final : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Builds a message from pieces with operator<< and throws it with the given kind.
[[noreturn]] void throwError(ErrorKind kind, const std::string& message);

}  // namespace jitllm

// JITLLM_REQUIRE(cond, msg...) - a precondition on input: throws FAILED naming the problem.
// The message is any expression streamable into std::ostringstream, built only on failure.
#define JITLLM_REQUIRE(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::jitllm::throwError(::jitllm::ErrorKind::kFailed,                            \
                           ::jitllm::detail::concat(__VA_ARGS__));                  \
    }                                                                               \
  } while (0)

// JITLLM_FAIL(kind, msg...) - throws unconditionally.
#define JITLLM_FAIL(kind, ...) \
  ::jitllm::throwError(::jitllm::ErrorKind::kind, ::jitllm::detail::concat(__VA_ARGS__))

// JITLLM_ASSERT(cond) - a bug in jitllm itself, not bad input.
#define JITLLM_ASSERT(cond)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      ::jitllm::throwError(::jitllm::ErrorKind::kFailed,                                 \
                           ::jitllm::detail::concat("internal error: ", #cond, " at ",   \
                                                    __FILE__, ":", __LINE__));           \
    }                                                                                    \
  } while (0)

#include <sstream>
namespace jitllm::detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace jitllm::detail
