// The daemon's listening Unix socket: handed over by systemd (LISTEN_FDS), or created here.
//
// Creating one is careful about what a crash leaves behind: if a socket file exists and something
// answers on it, another jitllmd is serving that path and we refuse with a clear error; if nothing
// answers, the file is stale and is replaced. The parent directory is created when missing.
//
// Ownership: owns the descriptor (closed on destruction) and, when it created the socket file,
// removes it on destruction.
// Thread-safety: not thread-safe; made and destroyed on the main thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace jitllm::server {

struct ActivatedSockets;

class ListenSocket final {
 public:
  // What systemd passed (LISTEN_FDS), sorted by the names LISTEN_FDNAMES gives them
  // (FileDescriptorName= in the .socket units): sockets named `http` serve HTTP (Unix or TCP),
  // every other one must be the RPC socket - exactly one listening Unix stream socket, or none.
  // Error(FAILED) when it passed something else. Reads (and unsets) the environment: call once.
  static constexpr const char* kHttpName = "http";
  static ActivatedSockets fromSystemd();
  // Creates, binds and listens on `path` with the given file mode.
  static ListenSocket create(const std::string& path, unsigned mode);
  // An existing listening descriptor this object will own (nothing to remove on destruction).
  static ListenSocket adopt(int fd, std::string path) { return ListenSocket(fd, std::move(path), false, false); }

  ListenSocket(ListenSocket&& other) noexcept;
  ListenSocket& operator=(ListenSocket&&) = delete;
  ~ListenSocket();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool fromSystemdActivation() const { return activated_; }
  // Gives up ownership of the descriptor (the RPC loop wraps and closes it).
  int release();

 private:
  ListenSocket(int fd, std::string path, bool activated, bool ownsFile)
      : fd_(fd), path_(std::move(path)), activated_(activated), ownsFile_(ownsFile) {}

  int fd_;
  std::string path_;
  bool activated_;
  bool ownsFile_;
};

struct ActivatedSockets {
  std::optional<ListenSocket> rpc;
  std::vector<ListenSocket> http;
};

}  // namespace jitllm::server
