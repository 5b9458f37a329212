#include "engine/chat/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace jitllm::jinja {

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value CallArgs::get(std::string_view name, int index) const {
  for (const auto& [k, v] : named) {
    if (k == name) return v;
  }
  if (index >= 0 && size_t(index) < positional.size()) return positional[size_t(index)];
  return Value();
}

Value Value::list(std::vector<Value> items, bool generator) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->generator = generator;
  return Value(std::move(l));
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  std::get<std::shared_ptr<ListData>>(v.v_)->tuple = true;
  return v;
}

Value Value::dict(std::vector<std::pair<std::string, Value>> entries) {
  auto d = std::make_shared<DictData>();
  d->entries = std::move(entries);
  return Value(std::move(d));
}

Value Value::function(std::string name, NativeFunction call) {
  return Value(std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(call)}));
}

double Value::toDouble() const {
  switch (kind()) {
    case Kind::kBool:
      return asBool() ? 1 : 0;
    case Kind::kInt:
      return double(asInt());
    case Kind::kFloat:
      return asFloat();
    default:
      JITLLM_FAIL(kFailed, "expected a number, got ", typeName());
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return asBool();
    case Kind::kInt:
      return asInt() != 0;
    case Kind::kFloat:
      return asFloat() != 0;
    case Kind::kString:
      return !asString().empty();
    case Kind::kList:
      return asList().generator || !asList().items.empty();
    case Kind::kDict:
      return !asDict().entries.empty();
    case Kind::kFunction:
    case Kind::kNamespace:
      return true;
  }
  return false;
}

const char* Value::typeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return asList().generator ? "generator" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kFunction:
      return "function";
    case Kind::kNamespace:
      return "Namespace";
  }
  return "?";
}

std::string pythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: fixed notation for exponents in [-4, 16).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; i++) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ex;
  } else if (exponent < 0) {
    out = "0." + std::string(size_t(-exponent - 1), '0') + digits;
  } else if (size_t(exponent) + 1 >= digits.size()) {
    out = digits + std::string(size_t(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(exponent) + 1) + "." + digits.substr(size_t(exponent) + 1);
  }
  return negative ? "-" + out : out;
}

namespace {

std::string reprString(const std::string& s) {
  // Python picks single quotes unless the text has one and no double quote.
  bool hasSingle = s.find('\'') != std::string::npos, hasDouble = s.find('"') != std::string::npos;
  char quote = hasSingle && !hasDouble ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

namespace {
// Values nest only as deep as a template builds them ({% set x = [x] %} in a loop): printing and
// comparing them recurse, so they stop at a depth no real template reaches.
constexpr int kMaxValueDepth = 512;

std::string reprAt(const Value& v, int depth);
}  // namespace

std::string Value::repr() const { return reprAt(*this, 0); }

namespace {
std::string reprAt(const Value& v, int depth) {
  using Kind = Value::Kind;
  JITLLM_REQUIRE(depth < kMaxValueDepth, "a value nested more than ", kMaxValueDepth, " levels deep");
  switch (v.kind()) {
    case Kind::kString:
      return reprString(v.asString());
    case Kind::kList: {
      const ListData& l = v.asList();
      if (l.generator) return "<generator object>";
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); i++) {
        if (i) out += ", ";
        out += reprAt(l.items[i], depth + 1);
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      return out + (l.tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : v.asDict().entries) {
        if (!first) out += ", ";
        first = false;
        out += reprString(key) + ": " + reprAt(item, depth + 1);
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    default:
      return v.str();
  }
}
}  // namespace

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return asBool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(asInt());
    case Kind::kFloat:
      return pythonFloat(asFloat());
    case Kind::kString:
      return asString();
    case Kind::kFunction:
      return "<function " + asFunction().name + ">";
    default:
      return repr();
  }
}

namespace {
bool equalAt(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  JITLLM_REQUIRE(depth < kMaxValueDepth, "a value nested more than ", kMaxValueDepth, " levels deep");
  if (a.isNumber() && b.isNumber()) {
    if (a.kind() != K::kFloat && b.kind() != K::kFloat) {
      auto asI = [](const Value& v) { return v.kind() == K::kBool ? int64_t(v.asBool()) : v.asInt(); };
      return asI(a) == asI(b);
    }
    return a.toDouble() == b.toDouble();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.asString() == b.asString();
    case K::kList: {
      const auto &x = a.asList().items, &y = b.asList().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); i++) {
        if (!equalAt(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case K::kDict: {
      const auto &x = a.asDict(), &y = b.asDict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equalAt(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case K::kFunction:
      return &a.asFunction() == &b.asFunction();
    case K::kNamespace:
      return &a.asNamespace() == &b.asNamespace();
    default:
      return false;
  }
}

int compareAt(const Value& a, const Value& b, int depth) {
  JITLLM_REQUIRE(depth < kMaxValueDepth, "a value nested more than ", kMaxValueDepth, " levels deep");
  if (a.isNumber() && b.isNumber()) {
    double x = a.toDouble(), y = b.toDouble();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.isString() && b.isString()) {
    int c = a.asString().compare(b.asString());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.isList() && b.isList()) {
    const auto &x = a.asList().items, &y = b.asList().items;
    for (size_t i = 0; i < x.size() && i < y.size(); i++) {
      int c = compareAt(x[i], y[i], depth + 1);
      if (c) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  JITLLM_FAIL(kFailed, "'<' not supported between instances of '", a.typeName(), "' and '", b.typeName(), "'");
}
}  // namespace

bool equal(const Value& a, const Value& b) { return equalAt(a, b, 0); }
int compare(const Value& a, const Value& b) { return compareAt(a, b, 0); }

char controlEscape(char letter) {
  switch (letter) {
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return 0;
  }
}

std::u32string utf8Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = (unsigned char)s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + size_t(n) > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < n; k++) cp = (cp << 6) | ((unsigned char)s[i + size_t(k)] & 0x3f);
    out += cp;
    i += size_t(n);
  }
  return out;
}

std::string utf8Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3f));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

size_t utf8Length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

}  // namespace jitllm::jinja
