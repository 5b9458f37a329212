#include "engine/gguf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/regular_file.h"

namespace jitllm::gguf {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = openRegularFile(path, "model file");  // a FIFO would block the open
  try {
    map(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

MappedFile::MappedFile(int fd, const std::string& name) : path_(name) { map(fd); }

void MappedFile::map(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) JITLLM_FAIL(kFailed, path_, ": not a regular file");
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) JITLLM_FAIL(kFailed, path_, ": cannot map: ", std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace jitllm::gguf
