#include "engine/gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/gguf/mapped_file.h"
#include "base/error.h"

namespace jitllm::gguf {
namespace {

// Reads little-endian values from a bounded byte range. Every read checks the bytes left, so a
// length or count taken from the file can never move the cursor past the end.
class Cursor final {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  size_t position() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  bool has(size_t n) const { return n <= remaining(); }

  template <typename T>
  bool read(T* out) {
    if (!has(sizeof(T))) return false;
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  bool readBytes(uint8_t* out, size_t n) {
    if (!has(n)) return false;
    if (n != 0) std::memcpy(out, bytes_.data() + pos_, n);  // an empty array's out may be null
    pos_ += n;
    return true;
  }

  bool readString(std::string* out) {
    uint64_t len = 0;
    if (!read(&len) || len > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), size_t(len));
    pos_ += size_t(len);
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

// The least number of bytes one element of this type takes in the file: a bound used to refuse
// counts that the remaining bytes cannot possibly hold.
size_t minEncodedSize(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
    case ValueType::kString: return 8;   // the length prefix
    case ValueType::kArray: return 12;   // element type + count
  }
  return 1;
}

bool isValidValueType(uint32_t t) { return t <= uint32_t(ValueType::kFloat64); }

}  // namespace

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t TensorInfo::rows() const { return dims.empty() ? 0 : elements() / dims[0]; }

std::string TensorInfo::shapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); i++) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = path;
  file->mapping_ = std::make_shared<MappedFile>(path);
  file->bytes_ = file->mapping_->bytes();
  file->parse();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::openFd(int fd, const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = name;
  file->mapping_ = std::make_shared<MappedFile>(fd, name);
  file->bytes_ = file->mapping_->bytes();
  file->parse();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::fromBytes(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  file->ownedBytes_.assign(bytes.begin(), bytes.end());
  file->bytes_ = file->ownedBytes_;
  file->parse();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::share(const GgufFile& other) {
  if (!other.mapping_) return fromBytes(other.bytes_, other.name_);
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = other.name_;
  file->mapping_ = other.mapping_;
  file->bytes_ = file->mapping_->bytes();
  file->parse();
  return file;
}

GgufFile::~GgufFile() = default;

void GgufFile::fail(const std::string& what) const {
  JITLLM_FAIL(kFailed, name_, ": invalid GGUF: ", what);
}

void GgufFile::parse() {
  Cursor in(bytes_);
  uint32_t magic = 0;
  if (!in.read(&magic)) fail("file is too short for a GGUF header (" + std::to_string(bytes_.size()) + " bytes)");
  if (magic != kMagic) fail("bad magic (not a GGUF file)");
  if (!in.read(&version_)) fail("truncated header (version)");
  if (version_ == 1) fail("GGUF version 1 is not supported (only 2 and 3)");
  if (version_ != 2 && version_ != 3) fail("unsupported GGUF version " + std::to_string(version_));
  uint64_t tensorCount = 0, kvCount = 0;
  if (!in.read(&tensorCount) || !in.read(&kvCount)) fail("truncated header (counts)");
  // Each metadata entry needs at least a key length, a type and one byte; each tensor info at
  // least a name length, n_dims, one dim, a type and an offset.
  if (kvCount > in.remaining() / (8 + 4 + 1)) {
    fail("metadata count " + std::to_string(kvCount) + " cannot fit in the file");
  }
  if (tensorCount > in.remaining() / (8 + 4 + 8 + 4 + 8)) {
    fail("tensor count " + std::to_string(tensorCount) + " cannot fit in the file");
  }

  // Metadata.
  metadata_.reserve(size_t(kvCount));
  for (uint64_t i = 0; i < kvCount; i++) {
    std::string key;
    if (!in.readString(&key)) fail("truncated metadata key #" + std::to_string(i));
    if (key.empty()) fail("empty metadata key #" + std::to_string(i));
    uint32_t rawType = 0;
    if (!in.read(&rawType)) fail("truncated type of metadata key '" + key + "'");
    if (!isValidValueType(rawType)) {
      fail("metadata key '" + key + "' has unknown value type " + std::to_string(rawType));
    }
    // Values are read with an explicit stack-free recursion bounded by kMaxArrayDepth.
    auto readValue = [&](auto& self, ValueType type, int depth, Value* out) -> void {
      auto truncated = [&] { fail("truncated value of metadata key '" + key + "'"); };
      switch (type) {
        case ValueType::kUint8: { uint8_t v; if (!in.read(&v)) truncated(); *out = Value::u8(v); return; }
        case ValueType::kInt8: { int8_t v; if (!in.read(&v)) truncated(); *out = Value::i8(v); return; }
        case ValueType::kUint16: { uint16_t v; if (!in.read(&v)) truncated(); *out = Value::u16(v); return; }
        case ValueType::kInt16: { int16_t v; if (!in.read(&v)) truncated(); *out = Value::i16(v); return; }
        case ValueType::kUint32: { uint32_t v; if (!in.read(&v)) truncated(); *out = Value::u32(v); return; }
        case ValueType::kInt32: { int32_t v; if (!in.read(&v)) truncated(); *out = Value::i32(v); return; }
        case ValueType::kUint64: { uint64_t v; if (!in.read(&v)) truncated(); *out = Value::u64(v); return; }
        case ValueType::kInt64: { int64_t v; if (!in.read(&v)) truncated(); *out = Value::i64(v); return; }
        case ValueType::kFloat32: { float v; if (!in.read(&v)) truncated(); *out = Value::f32(v); return; }
        case ValueType::kFloat64: { double v; if (!in.read(&v)) truncated(); *out = Value::f64(v); return; }
        case ValueType::kBool: {
          uint8_t v;
          if (!in.read(&v)) truncated();
          if (v > 1) fail("metadata key '" + key + "' has a bool that is neither 0 nor 1");
          *out = Value::boolean(v != 0);
          return;
        }
        case ValueType::kString: {
          std::string s;
          if (!in.readString(&s)) truncated();
          *out = Value::string(std::move(s));
          return;
        }
        case ValueType::kArray: {
          if (depth >= kMaxArrayDepth) fail("metadata key '" + key + "' nests arrays too deeply");
          uint32_t rawElem = 0;
          uint64_t count = 0;
          if (!in.read(&rawElem) || !in.read(&count)) truncated();
          if (!isValidValueType(rawElem)) {
            fail("metadata key '" + key + "' is an array of unknown type " + std::to_string(rawElem));
          }
          auto elemType = ValueType(rawElem);
          const size_t width = scalarSize(elemType);
          if (count > in.remaining() / minEncodedSize(elemType)) {
            fail("metadata key '" + key + "' claims " + std::to_string(count) +
                 " array elements, more than the file holds");
          }
          Array array;
          array.elementType = elemType;
          if (width != 0) {
            array.packed.resize(size_t(count) * width);
            if (!in.readBytes(array.packed.data(), array.packed.size())) truncated();
            if (elemType == ValueType::kBool) {
              for (uint8_t b : array.packed) {
                if (b > 1) fail("metadata key '" + key + "' has a bool that is neither 0 nor 1");
              }
            }
          } else {
            array.items.resize(size_t(count));
            for (auto& item : array.items) self(self, elemType, depth + 1, &item);
          }
          *out = Value(ValueType::kArray, std::move(array));
          return;
        }
      }
      fail("metadata key '" + key + "' has unknown value type");
    };
    Value value;
    readValue(readValue, ValueType(rawType), 0, &value);
    if (!metadataIndex_.emplace(key, metadata_.size()).second) {
      fail("duplicate metadata key '" + key + "'");
    }
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const Value* a = find("general.alignment")) {
    auto v = a->asUint();
    if (a->type() != ValueType::kUint32 || !v) fail("general.alignment must be a uint32");
    if (*v == 0 || (*v & (*v - 1)) != 0) fail("general.alignment " + std::to_string(*v) + " is not a power of two");
    alignment_ = uint32_t(*v);
  }

  // Tensor infos.
  tensors_.reserve(size_t(tensorCount));
  for (uint64_t i = 0; i < tensorCount; i++) {
    TensorInfo t;
    if (!in.readString(&t.name)) fail("truncated name of tensor #" + std::to_string(i));
    if (t.name.empty()) fail("tensor #" + std::to_string(i) + " has an empty name");
    const std::string where = "tensor '" + t.name + "'";
    uint32_t nDims = 0;
    if (!in.read(&nDims)) fail("truncated " + where);
    if (nDims == 0 || nDims > uint32_t(kMaxDims)) {
      fail(where + " has " + std::to_string(nDims) + " dimensions (1 to 4 allowed)");
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < nDims; d++) {
      uint64_t dim = 0;
      if (!in.read(&dim)) fail("truncated " + where);
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max())) {
        fail(where + " has dimension " + std::to_string(d) + " of size " + std::to_string(dim));
      }
      if (int64_t(dim) > std::numeric_limits<int64_t>::max() / elements) {
        fail(where + " has a shape whose element count overflows");
      }
      elements *= int64_t(dim);
      t.dims.push_back(int64_t(dim));
    }
    uint32_t rawType = 0;
    if (!in.read(&rawType) || !in.read(&t.offset)) fail("truncated " + where);
    auto traits = quant::typeTraits(rawType);
    if (!traits) fail(where + " has unknown tensor type " + std::to_string(rawType));
    t.type = quant::TensorType(rawType);
    if (t.dims[0] % traits->blockElems != 0) {
      fail(where + " of type " + std::string(traits->name) + " has row length " + std::to_string(t.dims[0]) +
           ", not a multiple of its block size " + std::to_string(traits->blockElems));
    }
    const uint64_t blocks = uint64_t(elements / traits->blockElems);
    if (blocks > std::numeric_limits<uint64_t>::max() / traits->blockBytes) fail(where + " is too large");
    const uint64_t nbytes = blocks * traits->blockBytes;
    if (nbytes > bytes_.size()) fail(where + " needs " + std::to_string(nbytes) + " bytes, more than the file has");
    t.nbytes = size_t(nbytes);
    if (t.offset % alignment_ != 0) {
      fail(where + " has offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
           std::to_string(alignment_));
    }
    if (!tensorIndex_.emplace(t.name, tensors_.size()).second) fail("duplicate tensor name '" + t.name + "'");
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const size_t headerEnd = in.position();
  dataOffset_ = (headerEnd + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && dataOffset_ > bytes_.size()) fail("truncated before the tensor data");
  const size_t dataSize = bytes_.size() - std::min(dataOffset_, bytes_.size());

  // Every tensor lies inside the data section, and no two overlap.
  std::vector<const TensorInfo*> byOffset;
  byOffset.reserve(tensors_.size());
  for (auto& t : tensors_) {
    if (t.offset > dataSize || t.nbytes > dataSize - t.offset) {
      fail("tensor '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes at offset " +
           std::to_string(t.offset) + ") lies outside the file's data section of " +
           std::to_string(dataSize) + " bytes");
    }
    t.data = bytes_.data() + dataOffset_ + t.offset;
    byOffset.push_back(&t);
  }
  std::sort(byOffset.begin(), byOffset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < byOffset.size(); i++) {
    const TensorInfo* prev = byOffset[i - 1];
    if (prev->offset + prev->nbytes > byOffset[i]->offset) {
      fail("tensors '" + prev->name + "' and '" + byOffset[i]->name + "' overlap");
    }
  }
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = metadataIndex_.find(std::string(key));
  return it == metadataIndex_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* GgufFile::findTensor(std::string_view name) const {
  auto it = tensorIndex_.find(std::string(name));
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void wrongType(const std::string& file, std::string_view key, const Value& v, const char* wanted) {
  JITLLM_FAIL(kFailed, file, ": metadata key '", key, "' is a ", valueTypeName(v.type()), ", expected ", wanted);
}
}  // namespace

std::optional<std::string> GgufFile::getString(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->asString()) wrongType(name_, key, *v, "string");
  return *v->asString();
}

std::optional<int64_t> GgufFile::getInt(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto i = v->isInteger() ? v->asInt() : std::nullopt;
  if (!i) wrongType(name_, key, *v, "integer in int64 range");
  return i;
}

std::optional<uint32_t> GgufFile::getU32(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto i = v->isInteger() ? v->asUint() : std::nullopt;
  if (!i || *i > std::numeric_limits<uint32_t>::max()) wrongType(name_, key, *v, "integer in uint32 range");
  return uint32_t(*i);
}

std::optional<double> GgufFile::getFloat(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->isNumber()) wrongType(name_, key, *v, "number");
  return v->asFloat();
}

std::optional<bool> GgufFile::getBool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->asBool()) wrongType(name_, key, *v, "bool");
  return v->asBool();
}

std::optional<std::vector<std::string>> GgufFile::getStringArray(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const Array* a = v->asArray();
  if (!a || a->elementType != ValueType::kString) wrongType(name_, key, *v, "array of strings");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) out.push_back(*item.asString());
  return out;
}

std::optional<std::vector<float>> GgufFile::getF32Array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const Array* a = v->asArray();
  if (!a || !(a->elementType == ValueType::kFloat32 || a->elementType == ValueType::kFloat64)) {
    wrongType(name_, key, *v, "array of floats");
  }
  std::vector<float> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); i++) out.push_back(float(*a->at(i).asFloat()));
  return out;
}

std::optional<std::vector<int32_t>> GgufFile::getI32Array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const Array* a = v->asArray();
  if (!a || a->elementType == ValueType::kString || a->elementType == ValueType::kArray ||
      a->elementType == ValueType::kFloat32 || a->elementType == ValueType::kFloat64 ||
      a->elementType == ValueType::kBool) {
    wrongType(name_, key, *v, "array of integers");
  }
  std::vector<int32_t> out;
  out.reserve(a->size());
  for (size_t k = 0; k < a->size(); k++) {
    auto i = a->at(k).asInt();
    if (!i || *i < std::numeric_limits<int32_t>::min() || *i > std::numeric_limits<int32_t>::max()) {
      wrongType(name_, key, *v, "array of int32-range integers");
    }
    out.push_back(int32_t(*i));
  }
  return out;
}

}  // namespace jitllm::gguf
