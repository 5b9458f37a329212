// A GGUF metadata value: one of the format's thirteen value types, arrays nesting freely.
//
// Thread-safety: a value; const access from many threads is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace jitllm::gguf {

// Numbered as in the GGUF specification (gguf_type).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* valueTypeName(ValueType type);
// Bytes of one value of a fixed-size type (numbers, bool); 0 for string and array.
size_t scalarSize(ValueType type);

class Value;

// An array of one element type. Numbers and bools stay packed as in the file (a hostile file's
// million-element array costs what it weighs, not 48 bytes an element); strings and nested
// arrays are Values.
struct Array {
  ValueType elementType = ValueType::kUint8;
  std::vector<Value> items;    // string and array elements
  std::vector<uint8_t> packed; // numeric and bool elements, little-endian, scalarSize() each

  size_t size() const;
  Value at(size_t i) const;  // any element, as a Value
};

class Value final {
 public:
  using Storage = std::variant<uint64_t, int64_t, double, bool, std::string, Array>;

  Value() = default;
  Value(ValueType type, Storage storage) : type_(type), storage_(std::move(storage)) {}

  static Value u8(uint8_t v) { return {ValueType::kUint8, uint64_t{v}}; }
  static Value i8(int8_t v) { return {ValueType::kInt8, int64_t{v}}; }
  static Value u16(uint16_t v) { return {ValueType::kUint16, uint64_t{v}}; }
  static Value i16(int16_t v) { return {ValueType::kInt16, int64_t{v}}; }
  static Value u32(uint32_t v) { return {ValueType::kUint32, uint64_t{v}}; }
  static Value i32(int32_t v) { return {ValueType::kInt32, int64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::kUint64, v}; }
  static Value i64(int64_t v) { return {ValueType::kInt64, v}; }
  static Value f32(float v) { return {ValueType::kFloat32, double{v}}; }
  static Value f64(double v) { return {ValueType::kFloat64, v}; }
  static Value boolean(bool v) { return {ValueType::kBool, v}; }
  static Value string(std::string v) { return {ValueType::kString, std::move(v)}; }
  // Elements must all be of elementType.
  static Value array(ValueType elementType, const std::vector<Value>& items);
  static Value stringArray(const std::vector<std::string>& items);
  static Value f32Array(const std::vector<float>& items);
  static Value i32Array(const std::vector<int32_t>& items);

  ValueType type() const { return type_; }
  const Storage& storage() const { return storage_; }

  bool isInteger() const;  // any of the eight integer types
  bool isNumber() const;   // integer or float
  // Conversions that succeed only when the value is of a fitting kind and in range.
  std::optional<int64_t> asInt() const;
  std::optional<uint64_t> asUint() const;
  std::optional<double> asFloat() const;  // any number
  std::optional<bool> asBool() const;
  const std::string* asString() const;
  const Array* asArray() const;

 private:
  ValueType type_ = ValueType::kUint8;
  Storage storage_ = uint64_t{0};
};

}  // namespace jitllm::gguf
