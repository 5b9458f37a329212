// HTTP written and read by hand over a raw socket, for the tests of jitllmd's HTTP API: hostile
// clients are what no HTTP library would send, and a test that times a stream wants the bytes as
// they come.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tests/daemon/daemon_harness.h"

namespace jitllm::testing {

inline bool sendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

// Whether `raw` holds a whole response: its headers, and a body of Content-Length bytes or a
// chunked one up to its last chunk (KJ keeps the connection open after it).
inline bool complete(const std::string& raw) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  const std::string headers = raw.substr(0, end);
  const size_t length = headers.find("Content-Length: ");
  if (length != std::string::npos) return raw.size() - end - 4 >= std::stoul(headers.substr(length + 16));
  return raw.size() >= 5 && raw.compare(raw.size() - 5, 5, "0\r\n\r\n") == 0;
}

// What the daemon sends until `done(received)` holds, it closes the connection, or `timeout` passes.
template <typename Done>
std::string readUntil(int fd, std::chrono::milliseconds timeout, Done&& done) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + scaled(timeout);
  char buf[65536];
  while (!done(out) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

inline std::string readResponse(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  return readUntil(fd, timeout, complete);
}
inline std::string readAll(int fd, std::chrono::milliseconds timeout) {
  return readUntil(fd, timeout, [](const std::string&) { return false; });
}

struct Reply {
  int status = 0;
  std::string body;
};

inline Reply parseReply(const std::string& raw) {
  Reply r;
  if (raw.rfind("HTTP/1.1 ", 0) == 0) r.status = std::stoi(raw.substr(9, 3));
  const size_t end = raw.find("\r\n\r\n");
  if (end != std::string::npos) r.body = raw.substr(end + 4);
  return r;
}

inline std::string request(const std::string& method, const std::string& path, const std::string& body) {
  return method + " " + path +
         " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

inline Reply call(const std::string& socket, const std::string& method, const std::string& path,
                  const std::string& body = "") {
  const int fd = rawConnect(socket);
  if (fd < 0) return {};
  sendAll(fd, request(method, path, body));
  Reply r = parseReply(readResponse(fd));
  ::close(fd);
  return r;
}

}  // namespace jitllm::testing
