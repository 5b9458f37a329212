#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace jitllm {
namespace {

const char* typeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

void requireRegularFile(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) JITLLM_FAIL(kFailed, what, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) JITLLM_FAIL(kFailed, what, " is ", typeName(st.st_mode), ", not a regular file");
}

int openRegularFile(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) JITLLM_FAIL(kFailed, what, " ", path, ": cannot open: ", std::strerror(errno));
  try {
    requireRegularFile(fd, std::string(what) + " " + path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  // Reads of a regular file never block; the flag only mattered for the open.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string readRegularFile(const std::string& path, const char* what, size_t maxBytes) {
  const int fd = openRegularFile(path, what);
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      JITLLM_FAIL(kFailed, what, " ", path, ": cannot read: ", std::strerror(e));
    }
    if (n == 0) break;
    text.append(buffer, size_t(n));
    if (text.size() > maxBytes) {
      ::close(fd);
      JITLLM_FAIL(kFailed, what, " ", path, " is larger than ", maxBytes, " bytes");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace jitllm
