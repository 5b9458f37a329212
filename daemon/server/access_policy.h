// Who may do what, decided from the peer credentials of each connection (SO_PEERCRED).
//
// Anyone who can connect (the socket's mode and group decide that) may generate, chat, list and
// cancel their own sessions. Loading, unloading and cancelling others' sessions (later also
// migrate, pin, policy) need an admin: root, the daemon's own user (a user running their own
// daemon administers it), or a member of the configured admin group. A model path given to `load`
// is opened only if the client itself could read it (mode bits along the whole path, against the
// client's uid and groups); clients normally pass an open descriptor instead.
//
// Thread-safety: immutable after construction except setAdminGroup (config reload), which is
// guarded; all methods may be called from any thread.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <vector>

namespace jitllm::server {

struct PeerCredentials {
  uid_t uid = 0;
  pid_t pid = 0;
};

class AccessPolicy final {
 public:
  explicit AccessPolicy(std::string adminGroup);

  void setAdminGroup(std::string group);
  bool isAdmin(uid_t uid) const;
  // Error(FAILED) "permission denied: <operation> needs ..." for non-admins.
  void requireAdmin(uid_t uid, const std::string& operation) const;
  // Whether `uid` could open `path` for reading (every directory searchable, the file readable).
  bool canRead(const std::string& path, uid_t uid) const;
  // The groups `uid` is in (its primary one and the supplementary ones); empty for an unknown uid.
  std::vector<gid_t> groupsOf(uid_t uid) const;

 private:
  mutable std::mutex mutex_;
  std::string adminGroup_;
};

}  // namespace jitllm::server
