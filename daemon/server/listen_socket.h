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

namespace jitllm::server {

class ListenSocket final {
 public:
  // The socket systemd passed us, if it passed exactly one Unix stream socket; nullopt when it
  // passed none. Error(FAILED) when it passed something else.
  static std::optional<ListenSocket> fromSystemd();
  // Creates, binds and listens on `path` with the given file mode.
  static ListenSocket create(const std::string& path, unsigned mode);

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

}  // namespace jitllm::server
