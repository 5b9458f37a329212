#include "daemon/server/kj_errors.h"

namespace jitllm::server {

kj::Exception toKjException(const Error& e) {
  kj::Exception::Type type = kj::Exception::Type::FAILED;
  switch (e.kind()) {
    case ErrorKind::kFailed:
      type = kj::Exception::Type::FAILED;
      break;
    case ErrorKind::kOverloaded:
      type = kj::Exception::Type::OVERLOADED;
      break;
    case ErrorKind::kDisconnected:
      type = kj::Exception::Type::DISCONNECTED;
      break;
    case ErrorKind::kUnimplemented:
      type = kj::Exception::Type::UNIMPLEMENTED;
      break;
  }
  return kj::Exception(type, __FILE__, __LINE__, kj::str(e.what()));
}

kj::Exception currentAsKjException() {
  try {
    throw;
  } catch (const kj::Exception& e) {
    return e;
  } catch (const Error& e) {
    return toKjException(e);
  } catch (const std::exception& e) {
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(e.what()));
  } catch (...) {
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str("unknown error"));
  }
}

}  // namespace jitllm::server
