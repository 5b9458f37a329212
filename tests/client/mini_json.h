// A strict RFC 8259 JSON reader for tests: it checks that jitllmctl's --json output parses and
// lets a test read fields out of it. Throws std::runtime_error naming the offset of a syntax
// error. Not for production: no depth limit, numbers as double.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jitllm::testing {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;

  bool has(std::string_view key) const {
    for (const auto& [k, v] : object) {
      if (k == key) return true;
    }
    return false;
  }
  const JsonValue& operator[](std::string_view key) const {
    if (type != Type::kObject) throw std::runtime_error("not an object, looking up " + std::string(key));
    for (const auto& [k, v] : object) {
      if (k == key) return v;
    }
    throw std::runtime_error("no key " + std::string(key));
  }
  const JsonValue& operator[](size_t i) const { return array.at(i); }
  std::vector<int32_t> ints() const {
    std::vector<int32_t> out;
    for (const auto& v : array) out.push_back(int32_t(v.number));
    return out;
  }
};

class JsonReader final {
 public:
  static JsonValue parse(std::string_view text) {
    JsonReader r(text);
    r.skipSpace();
    JsonValue v = r.value();
    r.skipSpace();
    if (r.pos_ != text.size()) r.fail("trailing characters");
    return v;
  }

 private:
  explicit JsonReader(std::string_view text) : s_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_) + " in: " + std::string(s_));
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    pos_++;
  }
  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) pos_++;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("bad literal");
    pos_ += word.size();
  }

  JsonValue value() {
    JsonValue v;
    switch (peek()) {
      case '{': {
        v.type = JsonValue::Type::kObject;
        pos_++;
        skipSpace();
        if (peek() == '}') {
          pos_++;
          return v;
        }
        while (true) {
          skipSpace();
          std::string key = stringLiteral();
          skipSpace();
          expect(':');
          skipSpace();
          v.object.emplace_back(std::move(key), value());
          skipSpace();
          if (peek() == ',') {
            pos_++;
            continue;
          }
          expect('}');
          return v;
        }
      }
      case '[': {
        v.type = JsonValue::Type::kArray;
        pos_++;
        skipSpace();
        if (peek() == ']') {
          pos_++;
          return v;
        }
        while (true) {
          skipSpace();
          v.array.push_back(value());
          skipSpace();
          if (peek() == ',') {
            pos_++;
            continue;
          }
          expect(']');
          return v;
        }
      }
      case '"':
        v.type = JsonValue::Type::kString;
        v.string = stringLiteral();
        return v;
      case 't':
        literal("true");
        v.type = JsonValue::Type::kBool;
        v.boolean = true;
        return v;
      case 'f':
        literal("false");
        v.type = JsonValue::Type::kBool;
        return v;
      case 'n':
        literal("null");
        return v;
      default:
        v.type = JsonValue::Type::kNumber;
        v.number = numberLiteral();
        return v;
    }
  }

  double numberLiteral() {
    const size_t start = pos_;
    if (peek() == '-') pos_++;
    if (peek() == '0') {
      pos_++;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') pos_++;
    } else {
      fail("bad number");
    }
    if (peek() == '.') {
      pos_++;
      if (!(peek() >= '0' && peek() <= '9')) fail("bad fraction");
      while (peek() >= '0' && peek() <= '9') pos_++;
    }
    if (peek() == 'e' || peek() == 'E') {
      pos_++;
      if (peek() == '+' || peek() == '-') pos_++;
      if (!(peek() >= '0' && peek() <= '9')) fail("bad exponent");
      while (peek() >= '0' && peek() <= '9') pos_++;
    }
    return std::stod(std::string(s_.substr(start, pos_ - start)));
  }

  static void appendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else fail("bad hex digit");
    }
    return v;
  }

  std::string stringLiteral() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") fail("lone high surrogate");
            pos_ += 2;
            const uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          appendUtf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace jitllm::testing
