// Connecting to jitllmd's Unix socket, with errors that say what to do, and the File capability
// that carries a descriptor to it.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "jitllm/client_capnp.h"

namespace jitllm::client {
namespace {

// The daemon sends no descriptors to clients, but Cap'n Proto 0.9 only *sends* descriptors (load's
// File capability) on a connection made with a limit above zero; one keeps a hostile peer from
// filling our descriptor table all the same.
constexpr unsigned kMaxIncomingFdsPerMessage = 1;

std::string groupNameOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  struct group gr {};
  struct group* found = nullptr;
  char buf[4096];
  if (::getgrgid_r(st.st_gid, &gr, buf, sizeof(buf), &found) != 0 || found == nullptr) return std::to_string(st.st_gid);
  return gr.gr_name;
}

[[noreturn]] void throwConnectError(const std::string& path, int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      throw Error(ErrorKind::kDisconnected, notRunningMessage(path));
    case ECONNREFUSED:
      throw Error(ErrorKind::kDisconnected,
                  "jitllmd is not running (stale socket at " + path +
                      ", nobody listens on it): start it with `systemctl start jitllmd` or `jitllmd`");
    case EACCES:
    case EPERM: {
      const std::string group = groupNameOf(path);
      throw Error(ErrorKind::kFailed,
                  "permission denied on " + path + ": only members of the socket's group" +
                      (group.empty() ? std::string() : " '" + group + "'") +
                      " may use jitllmd; ask an administrator to run `sudo usermod -aG " +
                      (group.empty() ? std::string("jitllm") : group) + " $USER`, then log in again");
    }
    case EAGAIN:
      throw Error(ErrorKind::kOverloaded,
                  "jitllmd is busy (its listen queue at " + path + " is full): try again in a moment");
    default:
      throw Error(ErrorKind::kFailed, "cannot connect to jitllmd at " + path + ": " + std::strerror(error));
  }
}

class FileServer final : public rpc::File::Server {
 public:
  explicit FileServer(kj::AutoCloseFd fd) : fd_(kj::mv(fd)) {}
  kj::Maybe<int> getFd() override { return fd_.get(); }

 private:
  kj::AutoCloseFd fd_;
};

}  // namespace

kj::Own<DaemonConnection> DaemonConnection::connect(kj::LowLevelAsyncIoProvider& provider,
                                                    const std::string& socketPath) {
  const std::string path = defaultSocketPath(socketPath);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    throw Error(ErrorKind::kFailed, "socket path too long (" + std::to_string(path.size()) + " bytes, at most " +
                                        std::to_string(sizeof(addr.sun_path) - 1) + "): " + path);
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  kj::AutoCloseFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw Error(ErrorKind::kFailed, std::string("cannot create a socket: ") + std::strerror(errno));
  // Blocking connect: on a Unix socket it completes at once (or fails with the reason we report).
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) throwConnectError(path, errno);
  auto stream = provider.wrapUnixSocketFd(kj::mv(fd), kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
  return kj::heap<DaemonConnection>(path, kj::mv(stream));
}

DaemonConnection::DaemonConnection(std::string socketPath, kj::Own<kj::AsyncCapabilityStream> stream)
    : socketPath_(std::move(socketPath)),
      stream_(kj::mv(stream)),
      rpc_(*stream_, kMaxIncomingFdsPerMessage),
      daemon_(rpc_.bootstrap().castAs<rpc::Daemon>()) {}

DaemonConnection::~DaemonConnection() = default;

rpc::File::Client fileCapability(kj::AutoCloseFd fd) { return kj::heap<FileServer>(kj::mv(fd)); }

}  // namespace jitllm::client
