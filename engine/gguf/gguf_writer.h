// Writes GGUF v3 files: metadata in insertion order, tensor infos, aligned tensor data.
//
// Used by the random-model generator, by tests that build well-formed and hostile files, and by
// anything that needs to emit a model. Tensor data is copied in when added, so the writer owns
// everything it writes. For hostile-file tests, `rawOverrides` lets a test lie in the header.
//
// Thread-safety: not thread-safe; one thread builds and writes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/gguf_value.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm::gguf {

class GgufWriter final {
 public:
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32);

  void set(std::string key, Value value);  // replaces an existing key in place
  // dims[0] is the row length; data must hold exactly the tensor's bytes.
  void addTensor(std::string name, quant::TensorType type, std::vector<int64_t> dims,
                 std::span<const uint8_t> data);
  void addTensor(std::string name, quant::TensorType type, std::vector<int64_t> dims,
                 std::vector<uint8_t>&& data);  // takes the bytes without copying

  std::vector<uint8_t> serialize() const;
  std::vector<uint8_t> serializeHeader() const;  // everything before the tensor data
  void writeFile(const std::string& path) const;  // Error(FAILED) naming the path on I/O errors

  size_t tensorCount() const { return tensors_.size(); }

 private:
  struct PendingTensor {
    std::string name;
    quant::TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace jitllm::gguf
