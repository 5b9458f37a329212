// A small JSON writer for jitllmctl --json: compact output, strings escaped per RFC 8259 (quote,
// backslash, control characters; bytes that are not UTF-8 become U+FFFD so the output always
// parses), NaN and infinities written as null, doubles in their shortest exact form.
//
// Misuse (a value where a key is due, unbalanced ends, str() before the document is complete)
// throws std::logic_error: it is a bug in jitllmctl, not bad input.
//
// Thread-safety: one writer per thread.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::ctl {

class JsonWriter final {
 public:
  JsonWriter& beginObject();
  JsonWriter& endObject();
  JsonWriter& beginArray();
  JsonWriter& endArray();
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(double d);
  JsonWriter& value(float f) { return value(double(f)); }
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonWriter& value(T n) {
    if constexpr (std::is_signed_v<T>) return integer(int64_t(n));
    else return unsignedInteger(uint64_t(n));
  }
  JsonWriter& null();

  // key(name).value(v) in one call.
  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  // The finished document.
  const std::string& str() const;

 private:
  enum class Scope { kObject, kArray };
  struct Level {
    Scope scope;
    size_t count = 0;
    bool keyPending = false;
  };

  JsonWriter& integer(int64_t n);
  JsonWriter& unsignedInteger(uint64_t n);
  void beforeValue();

  std::string out_;
  std::vector<Level> stack_;
  bool done_ = false;
};

// `s` as a JSON string literal, quotes included.
std::string jsonQuote(std::string_view s);

}  // namespace jitllm::ctl
