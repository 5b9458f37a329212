#include "engine/chat/jinja/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace jitllm::jinja {

namespace {

constexpr int kMaxJsonDepth = 256;

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  Value document() {
    Value v = value(0);
    skipSpace();
    if (pos_ != s_.size()) fail("trailing text");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) { JITLLM_FAIL(kFailed, "invalid JSON at offset ", pos_, ": ", what); }

  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) pos_++;
  }

  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxJsonDepth) fail("nested too deeply");
    skipSpace();
    if (pos_ >= s_.size()) fail("unexpected end");
    char c = s_[pos_];
    if (c == '{') {
      pos_++;
      auto d = std::make_shared<DictData>();
      skipSpace();
      if (consume("}")) return Value(d);
      while (true) {
        skipSpace();
        if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
        std::string key = string();
        skipSpace();
        if (!consume(":")) fail("expected ':'");
        d->set(std::move(key), value(depth + 1));
        skipSpace();
        if (consume("}")) return Value(d);
        if (!consume(",")) fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      pos_++;
      std::vector<Value> items;
      skipSpace();
      if (consume("]")) return Value::list(std::move(items));
      while (true) {
        items.push_back(value(depth + 1));
        skipSpace();
        if (consume("]")) return Value::list(std::move(items));
        if (!consume(",")) fail("expected ',' or ']'");
      }
    }
    if (c == '"') return Value(string());
    if (consume("true")) return Value(true);
    if (consume("false")) return Value(false);
    if (consume("null")) return Value(None{});
    return number();
  }

  Value number() {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') pos_++;
    bool isFloat = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        pos_++;
      } else if (c == '.' || c == 'e' || c == 'E' ||
                 ((c == '+' || c == '-') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E'))) {
        isFloat = true;
        pos_++;
      } else {
        break;
      }
    }
    std::string_view text = s_.substr(start, pos_ - start);
    if (text.empty() || text == "-") fail("unexpected character");
    if (!isFloat) {
      int64_t i = 0;
      auto r = std::from_chars(text.data(), text.data() + text.size(), i);
      if (r.ec == std::errc() && r.ptr == text.data() + text.size()) return Value(i);
    }
    double d = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), d);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size()) fail("malformed number");
    return Value(d);
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= unsigned(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    pos_++;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'u': {
          char32_t cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00 && s_.substr(pos_, 2) == "\\u") {
            size_t save = pos_;
            pos_ += 2;
            unsigned low = hex4();
            if (low >= 0xdc00 && low < 0xe000) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            } else {
              pos_ = save;
            }
          }
          out += utf8Encode(std::u32string(1, cp));
          break;
        }
        default:
          if (char c = controlEscape(e)) {
            out += c;
          } else {
            fail("bad escape");
          }
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

void appendJsonString(std::string& out, const std::string& s, bool ensureAscii) {
  out += '"';
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    char hex[16];
    if (c < 0x20 || (ensureAscii && c == 0x7f)) {
      std::snprintf(hex, sizeof hex, "\\u%04x", c);
      out += hex;
    } else if (c >= 0x80 && ensureAscii) {
      size_t end = i + 1;
      while (end < s.size() && ((unsigned char)s[end] & 0xc0) == 0x80) end++;
      for (char32_t cp : utf8Decode(std::string_view(s).substr(i, end - i))) {
        if (cp >= 0x10000) {
          cp -= 0x10000;
          std::snprintf(hex, sizeof hex, "\\u%04x\\u%04x", unsigned(0xd800 + (cp >> 10)),
                        unsigned(0xdc00 + (cp & 0x3ff)));
        } else {
          std::snprintf(hex, sizeof hex, "\\u%04x", unsigned(cp));
        }
        out += hex;
      }
      i = end - 1;
    } else {
      out += char(c);
    }
  }
  out += '"';
}

void dump(std::string& out, const Value& v, const JsonStyle& style, int level) {
  using K = Value::Kind;
  JITLLM_REQUIRE(level < kMaxJsonDepth, "tojson: a value nested more than ", kMaxJsonDepth, " levels deep");
  auto newline = [&](int l) {
    if (!style.indent) return;
    out += '\n';
    for (int i = 0; i < l; i++) out += *style.indent;
  };
  switch (v.kind()) {
    case K::kNone:
      out += "null";
      return;
    case K::kBool:
      out += v.asBool() ? "true" : "false";
      return;
    case K::kInt:
      out += std::to_string(v.asInt());
      return;
    case K::kFloat: {
      double d = v.asFloat();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : pythonFloat(d);
      return;
    }
    case K::kString:
      appendJsonString(out, v.asString(), style.ensureAscii);
      return;
    case K::kList: {
      JITLLM_REQUIRE(!v.asList().generator, "Object of type generator is not JSON serializable");
      const auto& items = v.asList().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); i++) {
        if (i) out += style.itemSeparator;
        newline(level + 1);
        dump(out, items[i], style, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case K::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.asDict().entries) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (style.sortKeys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); i++) {
        if (i) out += style.itemSeparator;
        newline(level + 1);
        appendJsonString(out, entries[i]->first, style.ensureAscii);
        out += style.keySeparator;
        dump(out, entries[i]->second, style, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      JITLLM_FAIL(kFailed, "Object of type ", v.typeName(), " is not JSON serializable");
  }
}

}  // namespace

Value parseJson(std::string_view text) { return JsonReader(text).document(); }

std::string toJson(const Value& value, const JsonStyle& style) {
  std::string out;
  dump(out, value, style, 0);
  return out;
}

}  // namespace jitllm::jinja
