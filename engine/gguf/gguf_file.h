// A GGUF file (versions 2 and 3), read over mmap with strict validation.
//
// Opening parses and checks everything up front: header, every metadata entry (all thirteen value
// types, arrays nested to kMaxArrayDepth), tensor infos and the alignment key. A hostile or
// truncated file gets an Error(FAILED) whose message starts with the file's name and says what is
// wrong; no count, length or offset read from the file is trusted before it is checked against the
// bytes that remain, so nothing is allocated on the file's word alone.
//
// Ownership: GgufFile owns the mapping (or, for fromBytes, a copy of the bytes); TensorInfo::data
// points into it and lives as long as the GgufFile.
// Thread-safety: immutable after open; const access from many threads is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/gguf/gguf_value.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm::gguf {

class MappedFile;

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian uint32
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;  // ggml's GGML_MAX_DIMS
// Deeper nesting than this is certainly hostile; real files nest at most one level.
inline constexpr int kMaxArrayDepth = 8;

struct TensorInfo {
  std::string name;
  quant::TensorType type = quant::TensorType::kF32;
  std::vector<int64_t> dims;  // dims[0] is the row length (ggml's ne[0])
  uint64_t offset = 0;        // from the start of the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the file's bytes

  int64_t elements() const;
  int64_t rows() const;             // elements() / dims[0]
  std::string shapeString() const;  // "[64, 512]"
};

class GgufFile final {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Maps an open descriptor (it stays the caller's to close; the mapping outlives it).
  static std::unique_ptr<GgufFile> openFd(int fd, const std::string& name);
  // Parses bytes held in memory (a copy is kept); `name` stands for the file in messages.
  static std::unique_ptr<GgufFile> fromBytes(std::span<const uint8_t> bytes, std::string name);
  // The same file again, sharing `other`'s mapping (which lives while either does): a second model
  // of it (a replica) without opening it again - its descriptor may be long closed.
  static std::unique_ptr<GgufFile> share(const GgufFile& other);
  ~GgufFile();

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t fileSize() const { return bytes_.size(); }
  size_t dataOffset() const { return dataOffset_; }

  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;

  // Typed getters: nullopt when the key is absent; Error(FAILED) naming the key and the file
  // when it is present with a type that does not fit.
  std::optional<std::string> getString(std::string_view key) const;
  std::optional<int64_t> getInt(std::string_view key) const;
  std::optional<uint32_t> getU32(std::string_view key) const;  // integer in [0, 2^32)
  std::optional<double> getFloat(std::string_view key) const;
  std::optional<bool> getBool(std::string_view key) const;
  std::optional<std::vector<std::string>> getStringArray(std::string_view key) const;
  std::optional<std::vector<float>> getF32Array(std::string_view key) const;
  std::optional<std::vector<int32_t>> getI32Array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* findTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  void parse();
  [[noreturn]] void fail(const std::string& what) const;

  std::string name_;
  std::shared_ptr<MappedFile> mapping_;  // shared by share()
  std::vector<uint8_t> ownedBytes_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  size_t dataOffset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::unordered_map<std::string, size_t> metadataIndex_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensorIndex_;
};

}  // namespace jitllm::gguf
