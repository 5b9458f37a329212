#include "daemon/server/listen_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace jitllm::server {
namespace {

sockaddr_un addressOf(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  JITLLM_REQUIRE(path.size() < sizeof(addr.sun_path), "socket path '", path, "' is longer than ",
                 sizeof(addr.sun_path) - 1, " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// True when something accepts connections at `path` right now.
bool someoneListens(const std::string& path) {
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return false;
  const sockaddr_un addr = addressOf(path);
  const bool ok = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(probe);
  return ok;
}

}  // namespace

ActivatedSockets ListenSocket::fromSystemd() {
  ActivatedSockets out;
  char** names = nullptr;
  const int n = sd_listen_fds_with_names(1, &names);
  if (n <= 0) return out;
  const auto freeNames = [&] {
    for (int i = 0; names && i < n; i++) ::free(names[i]);
    ::free(names);
  };
  try {
    for (int i = 0; i < n; i++) {
      const int fd = SD_LISTEN_FDS_START + i;
      const std::string name = names && names[i] ? names[i] : "";
      if (name == kHttpName) {
        JITLLM_REQUIRE(sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) > 0, "the socket systemd passed as '", kHttpName,
                       "' is not a listening stream socket");
        out.http.push_back(ListenSocket(fd, "", true, false));
        continue;
      }
      JITLLM_REQUIRE(!out.rpc,
                     "systemd passed more than one RPC socket; jitllmd.socket should define exactly one "
                     "(name HTTP sockets FileDescriptorName=http)");
      JITLLM_REQUIRE(sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) > 0,
                     "the socket systemd passed is not a listening Unix stream socket");
      sockaddr_un addr{};
      socklen_t len = sizeof addr;
      std::string path;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && addr.sun_path[0] != '\0') {
        path = addr.sun_path;
      }
      out.rpc.emplace(ListenSocket(fd, path, true, false));
    }
  } catch (...) {
    freeNames();
    throw;
  }
  freeNames();
  return out;
}

ListenSocket ListenSocket::create(const std::string& path, unsigned mode) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  JITLLM_REQUIRE(!ec, "cannot create the socket's directory ", parent.string(), ": ", ec.message());
  const sockaddr_un addr = addressOf(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    JITLLM_REQUIRE(S_ISSOCK(st.st_mode), "'", path, "' exists and is not a socket; refusing to replace it");
    JITLLM_REQUIRE(!someoneListens(path), "another jitllmd is already serving ", path,
                   "; stop it first (systemctl stop jitllmd) or choose --socket");
    ::unlink(path.c_str());  // stale, from a crash
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  JITLLM_REQUIRE(fd >= 0, "socket(): ", std::strerror(errno));
  // The mode applies from bind on: no window in which others could connect.
  const mode_t old = ::umask(0777 & ~mode);
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bindErrno = errno;
  ::umask(old);
  if (bound != 0 || ::listen(fd, 128) != 0) {
    const int e = bound != 0 ? bindErrno : errno;
    ::close(fd);
    JITLLM_FAIL(kFailed, "cannot listen on ", path, ": ", std::strerror(e));
  }
  return ListenSocket(fd, path, false, true);
}

ListenSocket::ListenSocket(ListenSocket&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), activated_(o.activated_), ownsFile_(o.ownsFile_) {
  o.fd_ = -1;
  o.ownsFile_ = false;
}

ListenSocket::~ListenSocket() {
  if (fd_ >= 0) ::close(fd_);
  if (ownsFile_) ::unlink(path_.c_str());
}

int ListenSocket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace jitllm::server
