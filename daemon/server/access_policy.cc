#include "daemon/server/access_policy.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "base/error.h"

namespace jitllm::server {

AccessPolicy::AccessPolicy(std::string adminGroup) : adminGroup_(std::move(adminGroup)) {}

void AccessPolicy::setAdminGroup(std::string group) {
  std::lock_guard lock(mutex_);
  adminGroup_ = std::move(group);
}

std::vector<gid_t> AccessPolicy::groupsOf(uid_t uid) const {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) return {};
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(size_t(n));
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) return {pw.pw_gid};
  }
  groups.resize(size_t(n));
  return groups;
}

bool AccessPolicy::isAdmin(uid_t uid) const {
  if (uid == 0 || uid == ::geteuid()) return true;
  std::string group;
  {
    std::lock_guard lock(mutex_);
    group = adminGroup_;
  }
  if (group.empty()) return false;
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || found == nullptr) return false;
  const auto groups = groupsOf(uid);
  return std::find(groups.begin(), groups.end(), gr.gr_gid) != groups.end();
}

void AccessPolicy::requireAdmin(uid_t uid, const std::string& operation) const {
  if (isAdmin(uid)) return;
  std::string group;
  {
    std::lock_guard lock(mutex_);
    group = adminGroup_;
  }
  JITLLM_FAIL(kFailed, "permission denied: ", operation, " needs root or membership in the '", group,
              "' group (you are uid ", uid, ")");
}

bool AccessPolicy::canRead(const std::string& path, uid_t uid) const {
  if (uid == 0) return true;
  const auto groups = groupsOf(uid);
  auto allowed = [&](const struct stat& st, mode_t ownerBit, mode_t groupBit, mode_t otherBit) {
    if (st.st_uid == uid) return (st.st_mode & ownerBit) != 0;
    if (std::find(groups.begin(), groups.end(), st.st_gid) != groups.end()) return (st.st_mode & groupBit) != 0;
    return (st.st_mode & otherBit) != 0;
  };
  // Every directory on the way must be searchable.
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    struct stat st {};
    if (::stat(path.substr(0, slash).c_str(), &st) != 0) return false;
    if (!allowed(st, S_IXUSR, S_IXGRP, S_IXOTH)) return false;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return allowed(st, S_IRUSR, S_IRGRP, S_IROTH);
}

}  // namespace jitllm::server
