// An HTTP request's failure as OpenAI's clients expect it: a status code and an error object
// {"error": {"message", "type", "param", "code"}} (the shape of OpenAI's API reference), plus
// Retry-After when trying again later may work.
//
// Handlers throw HttpError for what they decide themselves (a bad parameter, an unknown model);
// everything else the daemon throws (jitllm::Error) is mapped by its kind: FAILED is the
// request's fault (400), OVERLOADED is "no capacity now" (429, Retry-After), DISCONNECTED is the
// daemon stopping or a device gone (503, Retry-After), UNIMPLEMENTED is 501; anything else is 500.
//
// Thread-safety: values and pure functions.
#pragma once

#include <kj/exception.h>

#include <exception>
#include <optional>
#include <string>

namespace jitllm {
class Error;
}

namespace jitllm::server::http {

class HttpError final : public std::exception {
 public:
  HttpError(int status, std::string type, std::string message, std::optional<std::string> param = std::nullopt,
            std::optional<std::string> code = std::nullopt)
      : status_(status),
        type_(std::move(type)),
        message_(std::move(message)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  // 400 invalid_request_error naming the parameter at fault.
  static HttpError badParameter(const std::string& param, const std::string& message) {
    return HttpError(400, "invalid_request_error", message, param);
  }

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const char* what() const noexcept override { return message_.c_str(); }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }
  // Seconds a client should wait before trying again; set for 429 and 503.
  std::optional<int> retryAfterSeconds() const;
  // {"error": {...}} as JSON text.
  std::string body() const;

 private:
  int status_;
  std::string type_, message_;
  std::optional<std::string> param_, code_;
};

// The exception being handled (inside a catch block) as an HttpError.
HttpError currentAsHttpError();
// A daemon error as an HttpError (see the mapping above).
HttpError httpErrorFor(const Error& e);

// KJ's promise chains carry kj::Exception only: an HttpError crosses them inside one (its
// description holds the error as JSON) and comes out whole on the other side; any other
// kj::Exception comes out mapped by its type.
kj::Exception asKjException(const HttpError& e);
HttpError fromKjException(const kj::Exception& e);

// Runs `fn`, turning whatever it throws into a kj::Exception that fromKjException() makes the
// right HttpError of.
template <typename Fn>
auto httpErrorsAsKj(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const kj::Exception&) {
    throw;
  } catch (...) {
    kj::throwFatalException(asKjException(currentAsHttpError()));
  }
}

}  // namespace jitllm::server::http
