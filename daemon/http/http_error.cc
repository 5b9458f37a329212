#include "daemon/http/http_error.h"

#include <kj/exception.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace jitllm::server::http {

std::optional<int> HttpError::retryAfterSeconds() const {
  // One second: a running reply on these models ends, or a session frees, about that often.
  if (status_ == 429 || status_ == 503) return 1;
  return std::nullopt;
}

std::string HttpError::body() const {
  nlohmann::json error = {{"message", message_}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (param_) error["param"] = *param_;
  if (code_) error["code"] = *code_;
  // Replacing invalid UTF-8 (a client's bytes quoted back) rather than throwing mid-error.
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
constexpr const char* kMarker = "jitllm-http-error ";
}  // namespace

HttpError httpErrorFor(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::kFailed:
      return HttpError(400, "invalid_request_error", e.what());
    case ErrorKind::kOverloaded:
      return HttpError(429, "rate_limit_error", e.what(), std::nullopt, "overloaded");
    case ErrorKind::kDisconnected:
      return HttpError(503, "server_error", e.what(), std::nullopt, "unavailable");
    case ErrorKind::kUnimplemented:
      return HttpError(501, "invalid_request_error", e.what(), std::nullopt, "unimplemented");
  }
  return HttpError(500, "server_error", e.what());
}

kj::Exception asKjException(const HttpError& e) {
  const nlohmann::json j = {{"status", e.status()},
                            {"type", e.type()},
                            {"message", e.what()},
                            {"param", e.param() ? nlohmann::json(*e.param()) : nlohmann::json()},
                            {"code", e.code() ? nlohmann::json(*e.code()) : nlohmann::json()}};
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::str(kMarker, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

HttpError fromKjException(const kj::Exception& e) {
  const std::string what = e.getDescription().cStr();
  const size_t at = what.find(kMarker);
  if (at != std::string::npos) {
    const auto j = nlohmann::json::parse(what.substr(at + std::strlen(kMarker)), nullptr, false);
    if (j.is_object()) {
      auto optional = [&](const char* key) {
        return j[key].is_string() ? std::optional<std::string>(j[key].get<std::string>()) : std::nullopt;
      };
      return HttpError(j.value("status", 500), j.value("type", "server_error"), j.value("message", ""),
                       optional("param"), optional("code"));
    }
  }
  try {
    throw e;
  } catch (...) {
    return currentAsHttpError();
  }
}

HttpError currentAsHttpError() {
  try {
    throw;
  } catch (const HttpError& e) {
    return e;
  } catch (const Error& e) {
    return httpErrorFor(e);
  } catch (const kj::Exception& e) {
    const std::string what = e.getDescription().cStr();
    switch (e.getType()) {
      case kj::Exception::Type::OVERLOADED:
        return HttpError(429, "rate_limit_error", what, std::nullopt, "overloaded");
      case kj::Exception::Type::DISCONNECTED:
        return HttpError(503, "server_error", what, std::nullopt, "unavailable");
      case kj::Exception::Type::UNIMPLEMENTED:
        return HttpError(501, "invalid_request_error", what, std::nullopt, "unimplemented");
      default:
        // Errors from the core cross threads as kj exceptions of type FAILED carrying our message.
        return HttpError(400, "invalid_request_error", what);
    }
  } catch (const std::exception& e) {
    spdlog::error("http: internal error: {}", e.what());
    return HttpError(500, "server_error", std::string("internal error: ") + e.what());
  }
  return HttpError(500, "server_error", "internal error");
}

}  // namespace jitllm::server::http
