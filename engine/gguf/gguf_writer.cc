#include "engine/gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/gguf/gguf_file.h"
#include "base/error.h"

namespace jitllm::gguf {
namespace {

class ByteSink final {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T v) {
    // resize + memcpy rather than insert: GCC 12 warns falsely (-Wstringop-overflow) on the latter.
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &v, sizeof(T));
  }
  void putString(const std::string& s) {
    put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void padTo(size_t alignment) {
    while (out_->size() % alignment) out_->push_back(0);
  }

  void putValue(const Value& v) {
    switch (v.type()) {
      case ValueType::kUint8: put<uint8_t>(uint8_t(*v.asUint())); break;
      case ValueType::kInt8: put<int8_t>(int8_t(*v.asInt())); break;
      case ValueType::kUint16: put<uint16_t>(uint16_t(*v.asUint())); break;
      case ValueType::kInt16: put<int16_t>(int16_t(*v.asInt())); break;
      case ValueType::kUint32: put<uint32_t>(uint32_t(*v.asUint())); break;
      case ValueType::kInt32: put<int32_t>(int32_t(*v.asInt())); break;
      case ValueType::kUint64: put<uint64_t>(*v.asUint()); break;
      case ValueType::kInt64: put<int64_t>(*v.asInt()); break;
      case ValueType::kFloat32: put<float>(float(*v.asFloat())); break;
      case ValueType::kFloat64: put<double>(*v.asFloat()); break;
      case ValueType::kBool: put<uint8_t>(*v.asBool() ? 1 : 0); break;
      case ValueType::kString: putString(*v.asString()); break;
      case ValueType::kArray: {
        const Array& a = *v.asArray();
        put<uint32_t>(uint32_t(a.elementType));
        put<uint64_t>(a.size());
        out_->insert(out_->end(), a.packed.begin(), a.packed.end());
        for (const auto& item : a.items) {
          JITLLM_REQUIRE(item.type() == a.elementType, "GGUF array element of type ",
                         valueTypeName(item.type()), " in an array of ", valueTypeName(a.elementType));
          putValue(item);
        }
        break;
      }
    }
  }

 private:
  std::vector<uint8_t>* out_;
};

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint32_t alignment) : version_(version), alignment_(alignment) {
  JITLLM_REQUIRE(version == 2 || version == 3, "GGUF writer: version ", version, " is not 2 or 3");
  JITLLM_REQUIRE(alignment != 0 && (alignment & (alignment - 1)) == 0, "GGUF writer: alignment ", alignment,
                 " is not a power of two");
  if (alignment != kDefaultAlignment) set("general.alignment", Value::u32(alignment));
}

void GgufWriter::set(std::string key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::addTensor(std::string name, quant::TensorType type, std::vector<int64_t> dims,
                           std::span<const uint8_t> data) {
  addTensor(std::move(name), type, std::move(dims), std::vector<uint8_t>(data.begin(), data.end()));
}

void GgufWriter::addTensor(std::string name, quant::TensorType type, std::vector<int64_t> dims,
                           std::vector<uint8_t>&& data) {
  JITLLM_REQUIRE(!dims.empty() && dims.size() <= size_t(kMaxDims), "tensor '", name, "': 1 to 4 dims");
  int64_t elements = 1;
  for (int64_t d : dims) {
    JITLLM_REQUIRE(d > 0, "tensor '", name, "': dimension of size ", d);
    elements *= d;
  }
  auto bytes = quant::rowBytes(type, dims[0]);
  JITLLM_REQUIRE(bytes.has_value(), "tensor '", name, "': row length ", dims[0], " does not fit type ",
                 quant::typeName(type));
  const size_t expected = *bytes * size_t(elements / dims[0]);
  JITLLM_REQUIRE(data.size() == expected, "tensor '", name, "': ", data.size(), " bytes given, ", expected,
                 " expected");
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(data)});
}

std::vector<uint8_t> GgufWriter::serializeHeader() const {
  std::vector<uint8_t> out;
  ByteSink sink(&out);
  sink.put<uint32_t>(kMagic);
  sink.put<uint32_t>(version_);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    sink.putString(key);
    sink.put<uint32_t>(uint32_t(value.type()));
    sink.putValue(value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    sink.putString(t.name);
    sink.put<uint32_t>(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) sink.put<uint64_t>(uint64_t(d));
    sink.put<uint32_t>(uint32_t(t.type));
    sink.put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  sink.padTo(alignment_);
  return out;
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> out = serializeHeader();
  ByteSink sink(&out);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    sink.padTo(alignment_);
  }
  return out;
}

void GgufWriter::writeFile(const std::string& path) const {
  // Streams the tensors rather than serialize()-ing, so a multi-GB model is not held twice.
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) JITLLM_FAIL(kFailed, path, ": cannot create: ", std::strerror(errno));
  auto write = [&](const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f.get()) != n) JITLLM_FAIL(kFailed, path, ": write failed: ", std::strerror(errno));
  };
  const std::vector<uint8_t> header = serializeHeader();
  write(header.data(), header.size());
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const auto& t : tensors_) {
    write(t.data.data(), t.data.size());
    write(zeros.data(), (alignment_ - t.data.size() % alignment_) % alignment_);
  }
  if (std::fflush(f.get()) != 0) JITLLM_FAIL(kFailed, path, ": write failed: ", std::strerror(errno));
}

}  // namespace jitllm::gguf
