// Opening files the daemon reads without letting their type stall it: a FIFO opened for reading
// blocks until a writer appears, a device node may block or never end, a directory "reads" as
// nothing. These open with O_NONBLOCK (an open that cannot block) and refuse anything but a
// regular file by name, before a single byte is read.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>

namespace jitllm {

// A descriptor of the regular file at `path` (O_RDONLY | O_CLOEXEC; the caller closes it).
// Error(FAILED) naming `what` and the path when it cannot be opened or is not a regular file
// ("is a FIFO", "is a directory", ...).
int openRegularFile(const std::string& path, const char* what);

// The whole of a small regular file: Error(FAILED) as openRegularFile, or when it is larger than
// `maxBytes`.
std::string readRegularFile(const std::string& path, const char* what, size_t maxBytes = size_t(1) << 20);

// Error(FAILED) naming `what` unless `fd` is a regular file (a descriptor a client passed).
void requireRegularFile(int fd, const std::string& what);

}  // namespace jitllm
