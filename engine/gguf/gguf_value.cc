#include "engine/gguf/gguf_value.h"

#include <cstring>
#include <limits>

namespace jitllm::gguf {

const char* valueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "unknown";
}

size_t scalarSize(ValueType type) {
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
    case ValueType::kFloat64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

namespace {
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
}  // namespace

size_t Array::size() const {
  const size_t width = scalarSize(elementType);
  return width ? packed.size() / width : items.size();
}

Value Array::at(size_t i) const {
  const size_t width = scalarSize(elementType);
  if (width == 0) return items.at(i);
  const uint8_t* p = packed.data() + i * width;
  switch (elementType) {
    case ValueType::kUint8: return Value::u8(load<uint8_t>(p));
    case ValueType::kInt8: return Value::i8(load<int8_t>(p));
    case ValueType::kUint16: return Value::u16(load<uint16_t>(p));
    case ValueType::kInt16: return Value::i16(load<int16_t>(p));
    case ValueType::kUint32: return Value::u32(load<uint32_t>(p));
    case ValueType::kInt32: return Value::i32(load<int32_t>(p));
    case ValueType::kUint64: return Value::u64(load<uint64_t>(p));
    case ValueType::kInt64: return Value::i64(load<int64_t>(p));
    case ValueType::kFloat32: return Value::f32(load<float>(p));
    case ValueType::kFloat64: return Value::f64(load<double>(p));
    case ValueType::kBool: return Value::boolean(load<uint8_t>(p) != 0);
    default: return {};
  }
}

Value Value::array(ValueType elementType, const std::vector<Value>& items) {
  Array a;
  a.elementType = elementType;
  if (scalarSize(elementType) == 0) {
    a.items = items;
  } else {
    for (const Value& v : items) {
      switch (elementType) {
        case ValueType::kUint8: store<uint8_t>(a.packed, uint8_t(*v.asUint())); break;
        case ValueType::kInt8: store<int8_t>(a.packed, int8_t(*v.asInt())); break;
        case ValueType::kUint16: store<uint16_t>(a.packed, uint16_t(*v.asUint())); break;
        case ValueType::kInt16: store<int16_t>(a.packed, int16_t(*v.asInt())); break;
        case ValueType::kUint32: store<uint32_t>(a.packed, uint32_t(*v.asUint())); break;
        case ValueType::kInt32: store<int32_t>(a.packed, int32_t(*v.asInt())); break;
        case ValueType::kUint64: store<uint64_t>(a.packed, *v.asUint()); break;
        case ValueType::kInt64: store<int64_t>(a.packed, *v.asInt()); break;
        case ValueType::kFloat32: store<float>(a.packed, float(*v.asFloat())); break;
        case ValueType::kFloat64: store<double>(a.packed, *v.asFloat()); break;
        case ValueType::kBool: store<uint8_t>(a.packed, *v.asBool() ? 1 : 0); break;
        default: break;
      }
    }
  }
  return {ValueType::kArray, std::move(a)};
}

Value Value::stringArray(const std::vector<std::string>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(string(s));
  return array(ValueType::kString, v);
}

Value Value::f32Array(const std::vector<float>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (float f : items) v.push_back(f32(f));
  return array(ValueType::kFloat32, v);
}

Value Value::i32Array(const std::vector<int32_t>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (int32_t i : items) v.push_back(i32(i));
  return array(ValueType::kInt32, v);
}

bool Value::isInteger() const {
  return std::holds_alternative<uint64_t>(storage_) || std::holds_alternative<int64_t>(storage_);
}

bool Value::isNumber() const { return isInteger() || std::holds_alternative<double>(storage_); }

std::optional<int64_t> Value::asInt() const {
  if (auto* s = std::get_if<int64_t>(&storage_)) return *s;
  if (auto* u = std::get_if<uint64_t>(&storage_)) {
    if (*u <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(*u);
  }
  return std::nullopt;
}

std::optional<uint64_t> Value::asUint() const {
  if (auto* u = std::get_if<uint64_t>(&storage_)) return *u;
  if (auto* s = std::get_if<int64_t>(&storage_)) {
    if (*s >= 0) return uint64_t(*s);
  }
  return std::nullopt;
}

std::optional<double> Value::asFloat() const {
  if (auto* d = std::get_if<double>(&storage_)) return *d;
  if (auto* u = std::get_if<uint64_t>(&storage_)) return double(*u);
  if (auto* s = std::get_if<int64_t>(&storage_)) return double(*s);
  return std::nullopt;
}

std::optional<bool> Value::asBool() const {
  if (auto* b = std::get_if<bool>(&storage_)) return *b;
  return std::nullopt;
}

const std::string* Value::asString() const { return std::get_if<std::string>(&storage_); }
const Array* Value::asArray() const { return std::get_if<Array>(&storage_); }

}  // namespace jitllm::gguf
