#include "ctl/json_writer.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace jitllm::ctl {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (no overlongs, no surrogates, <= U+10FFFF),
// or 0 when the bytes there are not one.
size_t utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  const size_t left = s.size() - i;
  auto cont = [&](size_t k) { return k < left && (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // UTF-16 surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string jsonQuote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        i++;
        continue;
      case '\\':
        out += "\\\\";
        i++;
        continue;
      case '\b':
        out += "\\b";
        i++;
        continue;
      case '\f':
        out += "\\f";
        i++;
        continue;
      case '\n':
        out += "\\n";
        i++;
        continue;
      case '\r':
        out += "\\r";
        i++;
        continue;
      case '\t':
        out += "\\t";
        i++;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
      i++;
      continue;
    }
    const size_t n = utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for one byte that is not UTF-8
      i++;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  out += '"';
  return out;
}

void JsonWriter::beforeValue() {
  if (done_) throw std::logic_error("JsonWriter: a second top-level value");
  if (stack_.empty()) return;
  Level& level = stack_.back();
  if (level.scope == Scope::kObject) {
    if (!level.keyPending) throw std::logic_error("JsonWriter: a value in an object without a key");
    level.keyPending = false;
  } else if (level.count++ > 0) {
    out_ += ',';
  }
}

JsonWriter& JsonWriter::key(std::string_view name) {
  if (stack_.empty() || stack_.back().scope != Scope::kObject || stack_.back().keyPending) {
    throw std::logic_error("JsonWriter: a key outside an object or after another key");
  }
  Level& level = stack_.back();
  if (level.count++ > 0) out_ += ',';
  out_ += jsonQuote(name);
  out_ += ':';
  level.keyPending = true;
  return *this;
}

JsonWriter& JsonWriter::beginObject() {
  beforeValue();
  out_ += '{';
  stack_.push_back({Scope::kObject});
  return *this;
}

JsonWriter& JsonWriter::endObject() {
  if (stack_.empty() || stack_.back().scope != Scope::kObject || stack_.back().keyPending) {
    throw std::logic_error("JsonWriter: endObject without a matching beginObject, or after a key");
  }
  stack_.pop_back();
  out_ += '}';
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::beginArray() {
  beforeValue();
  out_ += '[';
  stack_.push_back({Scope::kArray});
  return *this;
}

JsonWriter& JsonWriter::endArray() {
  if (stack_.empty() || stack_.back().scope != Scope::kArray) {
    throw std::logic_error("JsonWriter: endArray without a matching beginArray");
  }
  stack_.pop_back();
  out_ += ']';
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  beforeValue();
  out_ += jsonQuote(s);
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  beforeValue();
  out_ += b ? "true" : "false";
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::value(double d) {
  if (!std::isfinite(d)) return null();  // JSON has no NaN or infinity
  beforeValue();
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);  // shortest form that reads back exactly
  out_.append(buf, end);
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::integer(int64_t n) {
  beforeValue();
  out_ += std::to_string(n);
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::unsignedInteger(uint64_t n) {
  beforeValue();
  out_ += std::to_string(n);
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::null() {
  beforeValue();
  out_ += "null";
  done_ = stack_.empty();
  return *this;
}

const std::string& JsonWriter::str() const {
  if (!done_) throw std::logic_error("JsonWriter: the document is not complete");
  return out_;
}

}  // namespace jitllm::ctl
