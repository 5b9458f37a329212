// A read-only memory mapping of a whole file.
//
// Owns the mapping and unmaps it on destruction. Weights are read straight from the mapping, so
// a model's bytes are paged in by the kernel on first touch and shared between processes.
//
// Thread-safety: immutable after construction; reads from many threads are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace jitllm::gguf {

class MappedFile final {
 public:
  // Throws Error(FAILED) naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  // Maps an already open descriptor (it stays the caller's); `name` stands for it in messages.
  MappedFile(int fd, const std::string& name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void map(int fd);

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace jitllm::gguf
