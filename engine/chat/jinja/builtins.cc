#include "engine/chat/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "base/error.h"
#include "engine/chat/jinja/json.h"

namespace jitllm::jinja {

namespace {

// ---- strings, with Python's notion of whitespace and case ----

bool isPyWhitespace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Case mapping covers ASCII and Latin-1 (the letters templates and chat roles use).
char32_t toUpper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
  return c;
}
char32_t toLower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  return c;
}
bool isCased(char32_t c) { return toUpper(c) != c || toLower(c) != c; }

std::string mapChars(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = utf8Decode(s);
  for (auto& c : u) c = f(c);
  return utf8Encode(u);
}

std::string title(const std::string& s) {
  std::u32string u = utf8Decode(s);
  bool previousCased = false;
  for (auto& c : u) {
    c = previousCased ? toLower(c) : toUpper(c);
    previousCased = isCased(c);
  }
  return utf8Encode(u);
}

std::string capitalize(const std::string& s) {
  std::u32string u = utf8Decode(s);
  for (size_t i = 0; i < u.size(); i++) u[i] = i == 0 ? toUpper(u[i]) : toLower(u[i]);
  return utf8Encode(u);
}

// str.strip/lstrip/rstrip: whitespace, or any of `chars` when given.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string u = utf8Decode(s);
  std::u32string set = chars.isString() ? utf8Decode(chars.asString()) : std::u32string();
  bool useSet = chars.isString();
  auto strips = [&](char32_t c) { return useSet ? set.find(c) != std::u32string::npos : isPyWhitespace(c); };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strips(u[b])) b++;
  }
  if (right) {
    while (e > b && strips(u[e - 1])) e--;
  }
  return utf8Encode(u.substr(b, e - b));
}

std::vector<Value> split(const std::string& s, const Value& sep, int64_t maxSplit, bool fromRight) {
  std::vector<std::string> parts;
  if (sep.isUndefined() || sep.isNone()) {
    // Runs of whitespace separate; leading and trailing whitespace give no empty parts.
    std::u32string u = utf8Decode(s);
    std::vector<std::u32string> words;
    if (!fromRight) {
      size_t i = 0;
      while (i < u.size()) {
        while (i < u.size() && isPyWhitespace(u[i])) i++;
        if (i == u.size()) break;
        if (maxSplit >= 0 && int64_t(words.size()) == maxSplit) {
          size_t e = u.size();
          while (e > i && isPyWhitespace(u[e - 1])) e--;
          words.push_back(u.substr(i, e - i));
          break;
        }
        size_t j = i;
        while (j < u.size() && !isPyWhitespace(u[j])) j++;
        words.push_back(u.substr(i, j - i));
        i = j;
      }
    } else {
      size_t i = u.size();
      while (i > 0) {
        while (i > 0 && isPyWhitespace(u[i - 1])) i--;
        if (i == 0) break;
        if (maxSplit >= 0 && int64_t(words.size()) == maxSplit) {
          size_t b = 0;
          while (b < i && isPyWhitespace(u[b])) b++;
          words.push_back(u.substr(b, i - b));
          break;
        }
        size_t j = i;
        while (j > 0 && !isPyWhitespace(u[j - 1])) j--;
        words.push_back(u.substr(j, i - j));
        i = j;
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto& w : words) parts.push_back(utf8Encode(w));
  } else {
    JITLLM_REQUIRE(sep.isString(), "must be str or None, not ", sep.typeName());
    const std::string& d = sep.asString();
    JITLLM_REQUIRE(!d.empty(), "empty separator");
    if (!fromRight) {
      size_t start = 0;
      while (true) {
        size_t at = (maxSplit >= 0 && int64_t(parts.size()) == maxSplit) ? std::string::npos : s.find(d, start);
        if (at == std::string::npos) {
          parts.push_back(s.substr(start));
          break;
        }
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
      }
    } else {
      size_t end = s.size();
      while (true) {
        size_t at = (maxSplit >= 0 && int64_t(parts.size()) == maxSplit) || end < d.size() ? std::string::npos
                                                                                           : s.rfind(d, end - d.size());
        if (at == std::string::npos) {
          parts.push_back(s.substr(0, end));
          break;
        }
        parts.push_back(s.substr(at + d.size(), end - at - d.size()));
        end = at;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::string replace(Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between characters (and at both ends).
    std::u32string u = utf8Decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); i++) {
      if (count < 0 || done < count) {
        out += to;
        done++;
      }
      if (i < u.size()) out += utf8Encode(u.substr(i, 1));
      in.chargeBytes(to.size() + 4);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    in.chargeBytes(at - start + to.size());
    start = at + from.size();
    done++;
  }
  out.append(s, start);
  return out;
}

// str.splitlines() (without keepends).
std::vector<std::string> splitLines(const std::string& s) {
  std::u32string u = utf8Decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < u.size(); i++) {
    char32_t c = u[i];
    bool breaks = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
                  c == 0x2028 || c == 0x2029;
    if (!breaks) continue;
    lines.push_back(utf8Encode(u.substr(start, i - start)));
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') i++;
    start = i + 1;
  }
  if (start < u.size()) lines.push_back(utf8Encode(u.substr(start)));
  return lines;
}

int64_t intArg(const Value& v, int64_t fallback, const char* what) {
  if (v.isUndefined() || v.isNone()) return fallback;
  JITLLM_REQUIRE(v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool, what, " must be an integer");
  return v.kind() == Value::Kind::kBool ? v.asBool() : v.asInt();
}

const std::string& stringArg(const Value& v, const char* what) {
  JITLLM_REQUIRE(v.isString(), what, " must be a string, not ", v.typeName());
  return v.asString();
}

// str.format: {} {0} {name}, with !r/!s; format specs other than none are refused.
std::string pyFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); i++) {
    char c = fmt[i];
    if (c == '}') {
      JITLLM_REQUIRE(i + 1 < fmt.size() && fmt[i + 1] == '}', "Single '}' encountered in format string");
      out += '}';
      i++;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i++;
      continue;
    }
    size_t end = fmt.find('}', i);
    JITLLM_REQUIRE(end != std::string::npos, "Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, end - i - 1);
    char conversion = 0;
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    JITLLM_REQUIRE(field.find(':') == std::string::npos, "format specifications are not supported: {", field, "}");
    Value v;
    if (field.empty()) {
      v = args.get("", int(auto_index++));
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      v = args.get("", std::stoi(field));
    } else {
      v = args.get(field, -1);
    }
    JITLLM_REQUIRE(!v.isUndefined(), "format: no argument for {", field, "}");
    out += conversion == 'r' ? v.repr() : v.str();
    i = end;
  }
  return out;
}

// printf-style `"%s" % x` and the `format` filter: %s %r %d %i %f %%.
std::string percentFormat(const std::string& fmt, const std::vector<Value>& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); i++) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    JITLLM_REQUIRE(i + 1 < fmt.size(), "incomplete format");
    char spec = fmt[++i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    JITLLM_REQUIRE(next < args.size(), "not enough arguments for format string");
    const Value& v = args[next++];
    if (spec == 's') {
      out += v.str();
    } else if (spec == 'r') {
      out += v.repr();
    } else if (spec == 'd' || spec == 'i') {
      JITLLM_REQUIRE(v.isNumber(), "%d format: a number is required, not ", v.typeName());
      out += std::to_string(int64_t(v.toDouble()));
    } else if (spec == 'f') {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%f", v.toDouble());
      out += buf;
    } else {
      JITLLM_FAIL(kFailed, "unsupported format character '", spec, "'");
    }
  }
  JITLLM_REQUIRE(next == args.size(), "not all arguments converted during string formatting");
  return out;
}

// jinja2's environment.getattr for filters' attribute= arguments, with dotted paths ("function.name").
Value itemAttribute(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.isDict()) {
      const Value* f = v.asDict().find(part);
      v = f ? *f : Value(Undefined{"'dict object' has no attribute '" + part + "'"});
    } else if (v.isList() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t i = std::stoul(part);
      v = i < v.asList().items.size() ? v.asList().items[i] : Value(Undefined{"no element " + part});
    } else if (v.kind() == Value::Kind::kNamespace) {
      const Value* f = v.asNamespace().find(part);
      v = f ? *f : Value(Undefined{"no attribute '" + part + "'"});
    } else if (v.isUndefined()) {
      JITLLM_FAIL(kFailed, v.asUndefined().what);
    } else {
      v = Value(Undefined{std::string("'") + v.typeName() + "' has no attribute '" + part + "'"});
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value makeList(Interpreter& in, std::vector<Value> items, bool generator = false) {
  in.chargeBytes(items.size() * sizeof(Value));
  return Value::list(std::move(items), generator);
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return utf8Length(v.asString());
    case Value::Kind::kList:
      JITLLM_REQUIRE(!v.asList().generator, "object of type 'generator' has no len()");
      return v.asList().items.size();
    case Value::Kind::kDict:
      return v.asDict().entries.size();
    default:
      JITLLM_FAIL(kFailed, "object of type '", v.typeName(), "' has no len()");
  }
}

// select/reject/selectattr/rejectattr: args are (test name, test args...) after the attribute.
Value selectItems(Interpreter& in, const Value& input, const CallArgs& args, bool byAttribute, bool keep) {
  std::vector<Value> out;
  if (!input.truthy()) return makeList(in, {}, true);  // jinja2 yields nothing for none, as for []
  size_t first = byAttribute ? 1 : 0;
  std::string attr;
  if (byAttribute) attr = stringArg(args.get("", 0), "the attribute");
  Value testName = args.get("", int(first));
  CallArgs testArgs;
  for (size_t i = first + 1; i < args.positional.size(); i++) testArgs.positional.push_back(args.positional[i]);
  for (const auto& item : iterate(input)) {
    in.step();
    Value subject = byAttribute ? itemAttribute(item, attr) : item;
    bool passes =
        testName.isUndefined() ? subject.truthy() : applyTest(in, stringArg(testName, "the test"), subject, testArgs);
    if (passes == keep) out.push_back(item);
  }
  return makeList(in, std::move(out), true);
}

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&);

Value filterTojson(Interpreter&, const Value& v, const CallArgs& args) {
  JsonStyle style;
  style.ensureAscii = args.get("ensure_ascii", 0).truthy();
  Value indent = args.get("indent", 1);
  if (indent.kind() == Value::Kind::kInt) {
    style.indent = std::string(size_t(std::clamp<int64_t>(indent.asInt(), 0, 64)), ' ');
  } else if (indent.isString()) {
    style.indent = indent.asString();
  }
  if (style.indent) style.itemSeparator = ",";
  Value separators = args.get("separators", 2);
  if (separators.isList() && separators.asList().items.size() == 2) {
    style.itemSeparator = stringArg(separators.asList().items[0], "separators");
    style.keySeparator = stringArg(separators.asList().items[1], "separators");
  }
  style.sortKeys = args.get("sort_keys", 3).truthy();
  return Value(toJson(v, style));
}

Value filterIndent(Interpreter&, const Value& v, const CallArgs& args) {
  Value width = args.get("width", 0);
  std::string indentation = width.isString()
                                ? width.asString()
                                : std::string(size_t(std::clamp<int64_t>(intArg(width, 4, "width"), 0, 256)), ' ');
  bool first = args.get("first", 1).truthy(), blank = args.get("blank", 2).truthy();
  std::vector<std::string> lines = splitLines(v.str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); i++) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indentation;
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value(std::move(out));
}

Value filterMap(Interpreter& in, const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  if (!v.truthy()) return makeList(in, {}, true);  // jinja2 maps nothing for none, as for []
  Value attribute = args.get("attribute", -1);
  if (!attribute.isUndefined()) {
    Value fallback = args.get("default", -1);
    for (const auto& item : iterate(v)) {
      in.step();
      Value got = itemAttribute(item, attribute.str());
      out.push_back(got.isUndefined() && !fallback.isUndefined() ? fallback : got);
    }
  } else {
    std::string filter = stringArg(args.get("", 0), "the filter name");
    CallArgs rest;
    for (size_t i = 1; i < args.positional.size(); i++) rest.positional.push_back(args.positional[i]);
    rest.named = args.named;
    for (const auto& item : iterate(v)) {
      in.step();
      out.push_back(applyFilter(in, filter, item, rest));
    }
  }
  return makeList(in, std::move(out), true);
}

Value filterJoin(Interpreter& in, const Value& v, const CallArgs& args) {
  Value sep = args.get("d", 0);
  Value attribute = args.get("attribute", 1);
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    in.step();
    if (!first) out += sep.str();
    first = false;
    out += (attribute.isUndefined() ? item : itemAttribute(item, attribute.str())).str();
    in.chargeBytes(out.size() / 16 + 1);
  }
  return Value(std::move(out));
}

Value filterSort(Interpreter& in, const Value& v, const CallArgs& args) {
  bool reverse = args.get("reverse", 0).truthy(), caseSensitive = args.get("case_sensitive", 1).truthy();
  Value attribute = args.get("attribute", 2);
  std::vector<Value> items = iterate(v);
  auto key = [&](const Value& x) {
    Value k = attribute.isUndefined() ? x : itemAttribute(x, attribute.str());
    return k.isString() && !caseSensitive ? Value(mapChars(k.asString(), toLower)) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    in.step();
    return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return makeList(in, std::move(items));
}

Value filterDictsort(Interpreter& in, const Value& v, const CallArgs& args) {
  JITLLM_REQUIRE(v.isDict(), "dictsort: expected a dict, got ", v.typeName());
  bool caseSensitive = args.get("case_sensitive", 0).truthy();
  bool byValue = args.get("by", 1).isString() && args.get("by", 1).asString() == "value";
  bool reverse = args.get("reverse", 2).truthy();
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.asDict().entries) pairs.push_back(Value::tuple({Value(k), val}));
  auto key = [&](const Value& p) {
    Value k = p.asList().items[byValue ? 1 : 0];
    return k.isString() && !caseSensitive ? Value(mapChars(k.asString(), toLower)) : k;
  };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    in.step();
    return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return makeList(in, std::move(pairs));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"trim", [](Interpreter&, const Value& v,
                  const CallArgs& a) { return Value(strip(v.str(), a.get("chars", 0), true, true)); }},
      {"length", [](Interpreter&, const Value& v, const CallArgs&) { return Value(int64_t(length(v))); }},
      {"count", [](Interpreter&, const Value& v, const CallArgs&) { return Value(int64_t(length(v))); }},
      {"tojson", filterTojson},
      {"items",
       [](Interpreter& in, const Value& v, const CallArgs&) {
         if (v.isUndefined()) return Value::list({});
         JITLLM_REQUIRE(v.isDict(), "items: expected a dict, got ", v.typeName());
         std::vector<Value> pairs;
         for (const auto& [k, val] : v.asDict().entries) pairs.push_back(Value::tuple({Value(k), val}));
         return makeList(in, std::move(pairs));
       }},
      {"safe", [](Interpreter&, const Value& v,
                  const CallArgs&) { return v.isString() ? Value::markup(v.asString()) : Value::markup(v.str()); }},
      {"string", [](Interpreter&, const Value& v, const CallArgs&) { return Value(v.str()); }},
      {"join", filterJoin},
      {"upper", [](Interpreter&, const Value& v, const CallArgs&) { return Value(mapChars(v.str(), toUpper)); }},
      {"lower", [](Interpreter&, const Value& v, const CallArgs&) { return Value(mapChars(v.str(), toLower)); }},
      {"title", [](Interpreter&, const Value& v, const CallArgs&) { return Value(title(v.str())); }},
      {"capitalize", [](Interpreter&, const Value& v, const CallArgs&) { return Value(capitalize(v.str())); }},
      {"replace",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         return Value(replace(in, v.str(), a.get("old", 0).str(), a.get("new", 1).str(),
                              intArg(a.get("count", 2), -1, "count")));
       }},
      {"default",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         Value fallback = a.get("default_value", 0);
         bool boolean = a.get("boolean", 1).truthy();
         if (v.isUndefined() || (boolean && !v.truthy())) return fallback.isUndefined() ? Value("") : fallback;
         return v;
       }},
      {"first",
       [](Interpreter&, const Value& v, const CallArgs&) {
         std::vector<Value> items = iterate(v);
         return items.empty() ? Value(Undefined{"No first item, sequence was empty."}) : items.front();
       }},
      {"last",
       [](Interpreter&, const Value& v, const CallArgs&) {
         JITLLM_REQUIRE(!(v.isList() && v.asList().generator), "'generator' object is not reversible");
         std::vector<Value> items = iterate(v);
         return items.empty() ? Value(Undefined{"No last item, sequence was empty."}) : items.back();
       }},
      {"indent", filterIndent},
      {"selectattr",
       [](Interpreter& in, const Value& v, const CallArgs& a) { return selectItems(in, v, a, true, true); }},
      {"rejectattr",
       [](Interpreter& in, const Value& v, const CallArgs& a) { return selectItems(in, v, a, true, false); }},
      {"select", [](Interpreter& in, const Value& v, const CallArgs& a) { return selectItems(in, v, a, false, true); }},
      {"reject",
       [](Interpreter& in, const Value& v, const CallArgs& a) { return selectItems(in, v, a, false, false); }},
      {"map", filterMap},
      {"list", [](Interpreter& in, const Value& v, const CallArgs&) { return makeList(in, iterate(v)); }},
      {"unique",
       [](Interpreter& in, const Value& v, const CallArgs&) {
         std::vector<Value> out;
         for (const auto& item : iterate(v)) {
           in.step();
           bool seen = false;
           for (const auto& o : out) seen = seen || equal(o, item);
           if (!seen) out.push_back(item);
         }
         return makeList(in, std::move(out), true);
       }},
      {"sort", filterSort},
      {"dictsort", filterDictsort},
      {"reverse",
       [](Interpreter& in, const Value& v, const CallArgs&) {
         if (v.isString()) {
           std::u32string u = utf8Decode(v.asString());
           std::reverse(u.begin(), u.end());
           return Value(utf8Encode(u));
         }
         std::vector<Value> items = iterate(v);
         std::reverse(items.begin(), items.end());
         return makeList(in, std::move(items), true);
       }},
      {"int",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         if (v.isNumber()) return Value(int64_t(v.toDouble()));
         if (v.isString()) {
           try {
             size_t used = 0;
             std::string s = strip(v.asString(), Value(), true, true);
             int64_t i = std::stoll(s, &used);
             if (used == s.size()) return Value(i);
             return Value(int64_t(std::stod(s)));
           } catch (const std::exception&) {
           }
         }
         Value fallback = a.get("default", 0);
         return fallback.isUndefined() ? Value(0) : fallback;
       }},
      {"float",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         if (v.isNumber()) return Value(v.toDouble());
         if (v.isString()) {
           try {
             return Value(std::stod(v.asString()));
           } catch (const std::exception&) {
           }
         }
         Value fallback = a.get("default", 0);
         return fallback.isUndefined() ? Value(0.0) : fallback;
       }},
      {"abs",
       [](Interpreter&, const Value& v, const CallArgs&) {
         if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.asFloat()));
         JITLLM_REQUIRE(v.isNumber(), "bad operand type for abs(): '", v.typeName(), "'");
         int64_t i = int64_t(v.toDouble());
         JITLLM_REQUIRE(i != INT64_MIN, "integer overflow");
         return Value(i < 0 ? -i : i);
       }},
      {"round",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         int64_t precision = std::clamp<int64_t>(intArg(a.get("precision", 0), 0, "precision"), -20, 20);
         double scale = std::pow(10.0, double(precision));
         return Value(std::nearbyint(v.toDouble() * scale) / scale);
       }},
      {"escape", [](Interpreter&, const Value& v,
                    const CallArgs&) { return v.isMarkup() ? v : Value::markup(htmlEscape(v.str())); }},
      {"format",
       [](Interpreter&, const Value& v, const CallArgs& a) { return Value(percentFormat(v.str(), a.positional)); }},
      {"min",
       [](Interpreter&, const Value& v, const CallArgs&) {
         std::vector<Value> items = iterate(v);
         if (items.empty()) return Value(Undefined{"No aggregated item, sequence was empty."});
         return *std::min_element(items.begin(), items.end(),
                                  [](const Value& x, const Value& y) { return compare(x, y) < 0; });
       }},
      {"max",
       [](Interpreter&, const Value& v, const CallArgs&) {
         std::vector<Value> items = iterate(v);
         if (items.empty()) return Value(Undefined{"No aggregated item, sequence was empty."});
         return *std::max_element(items.begin(), items.end(),
                                  [](const Value& x, const Value& y) { return compare(x, y) < 0; });
       }},
      {"sum",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         Value attribute = a.get("attribute", 0);
         Value total = a.get("start", 1).isUndefined() ? Value(0) : a.get("start", 1);
         for (const auto& item : iterate(v)) {
           in.step();
           Value x = attribute.isUndefined() ? item : itemAttribute(item, attribute.str());
           JITLLM_REQUIRE(x.isNumber() && total.isNumber(), "sum: unsupported operand types");
           if (x.kind() == Value::Kind::kFloat || total.kind() == Value::Kind::kFloat) {
             total = Value(total.toDouble() + x.toDouble());
           } else {
             total = Value(int64_t(total.toDouble()) + int64_t(x.toDouble()));
           }
         }
         return total;
       }},
      {"wordcount", [](Interpreter&, const Value& v,
                       const CallArgs&) { return Value(int64_t(split(v.str(), Value(), -1, false).size())); }},
  };
  return table;
}

bool isIterable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kString:
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return true;
    default:
      return false;
  }
}

Value bind(const Value& self, const char* name, Value (*method)(Interpreter&, const Value&, const CallArgs&)) {
  return Value::function(name,
                         [self, method](Interpreter& in, const CallArgs& args) { return method(in, self, args); });
}

[[noreturn]] void refuseMutation(const char* type, const std::string& name) {
  JITLLM_FAIL(kFailed, "access to attribute '", name, "' of '", type,
              "' object is unsafe (templates cannot change values they were given)");
}

Value stringMethod(const Value& self, const std::string& name) {
  using M = Value (*)(Interpreter&, const Value&, const CallArgs&);
  static const std::unordered_map<std::string, M> methods = {
      {"strip", [](Interpreter&, const Value& s,
                   const CallArgs& a) { return Value(strip(s.asString(), a.get("chars", 0), true, true)); }},
      {"lstrip", [](Interpreter&, const Value& s,
                    const CallArgs& a) { return Value(strip(s.asString(), a.get("chars", 0), true, false)); }},
      {"rstrip", [](Interpreter&, const Value& s,
                    const CallArgs& a) { return Value(strip(s.asString(), a.get("chars", 0), false, true)); }},
      {"split",
       [](Interpreter& in, const Value& s, const CallArgs& a) {
         return makeList(in, split(s.asString(), a.get("sep", 0), intArg(a.get("maxsplit", 1), -1, "maxsplit"), false));
       }},
      {"rsplit",
       [](Interpreter& in, const Value& s, const CallArgs& a) {
         return makeList(in, split(s.asString(), a.get("sep", 0), intArg(a.get("maxsplit", 1), -1, "maxsplit"), true));
       }},
      {"splitlines",
       [](Interpreter& in, const Value& s, const CallArgs&) {
         std::vector<Value> out;
         for (auto& l : splitLines(s.asString())) out.emplace_back(std::move(l));
         return makeList(in, std::move(out));
       }},
      {"startswith",
       [](Interpreter&, const Value& s, const CallArgs& a) {
         Value p = a.get("prefix", 0);
         std::vector<Value> options = p.isList() ? p.asList().items : std::vector<Value>{p};
         for (const auto& o : options) {
           if (s.asString().starts_with(stringArg(o, "startswith's prefix"))) return Value(true);
         }
         return Value(false);
       }},
      {"endswith",
       [](Interpreter&, const Value& s, const CallArgs& a) {
         Value p = a.get("suffix", 0);
         std::vector<Value> options = p.isList() ? p.asList().items : std::vector<Value>{p};
         for (const auto& o : options) {
           if (s.asString().ends_with(stringArg(o, "endswith's suffix"))) return Value(true);
         }
         return Value(false);
       }},
      {"replace",
       [](Interpreter& in, const Value& s, const CallArgs& a) {
         return Value(replace(in, s.asString(), stringArg(a.get("old", 0), "replace's old"),
                              stringArg(a.get("new", 1), "replace's new"), intArg(a.get("count", 2), -1, "count")));
       }},
      {"upper", [](Interpreter&, const Value& s, const CallArgs&) { return Value(mapChars(s.asString(), toUpper)); }},
      {"lower", [](Interpreter&, const Value& s, const CallArgs&) { return Value(mapChars(s.asString(), toLower)); }},
      {"title", [](Interpreter&, const Value& s, const CallArgs&) { return Value(title(s.asString())); }},
      {"capitalize", [](Interpreter&, const Value& s, const CallArgs&) { return Value(capitalize(s.asString())); }},
      {"find",
       [](Interpreter&, const Value& s, const CallArgs& a) {
         size_t at = s.asString().find(stringArg(a.get("sub", 0), "find's argument"));
         return Value(at == std::string::npos ? int64_t(-1) : int64_t(utf8Length(s.asString().substr(0, at))));
       }},
      {"rfind",
       [](Interpreter&, const Value& s, const CallArgs& a) {
         size_t at = s.asString().rfind(stringArg(a.get("sub", 0), "rfind's argument"));
         return Value(at == std::string::npos ? int64_t(-1) : int64_t(utf8Length(s.asString().substr(0, at))));
       }},
      {"count",
       [](Interpreter&, const Value& s, const CallArgs& a) {
         const std::string sub = stringArg(a.get("sub", 0), "count's argument");
         if (sub.empty()) return Value(int64_t(utf8Length(s.asString()) + 1));
         int64_t n = 0;
         for (size_t at = s.asString().find(sub); at != std::string::npos; at = s.asString().find(sub, at + sub.size()))
           n++;
         return Value(n);
       }},
      {"join",
       [](Interpreter& in, const Value& s, const CallArgs& a) {
         std::string out;
         bool first = true;
         for (const auto& item : iterate(a.get("iterable", 0))) {
           in.step();
           if (!first) out += s.asString();
           first = false;
           out += stringArg(item, "join's items");
         }
         return Value(std::move(out));
       }},
      {"format", [](Interpreter&, const Value& s, const CallArgs& a) { return Value(pyFormat(s.asString(), a)); }},
      {"isdigit",
       [](Interpreter&, const Value& s, const CallArgs&) {
         const std::string& t = s.asString();
         return Value(!t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }));
       }},
      {"isalpha",
       [](Interpreter&, const Value& s, const CallArgs&) {
         std::u32string u = utf8Decode(s.asString());
         return Value(!u.empty() && std::all_of(u.begin(), u.end(), [](char32_t c) { return isCased(c); }));
       }},
      {"isspace",
       [](Interpreter&, const Value& s, const CallArgs&) {
         std::u32string u = utf8Decode(s.asString());
         return Value(!u.empty() && std::all_of(u.begin(), u.end(), isPyWhitespace));
       }},
      {"isupper",
       [](Interpreter&, const Value& s, const CallArgs&) {
         return Value(mapChars(s.asString(), toUpper) == s.asString() &&
                      mapChars(s.asString(), toLower) != s.asString());
       }},
      {"islower",
       [](Interpreter&, const Value& s, const CallArgs&) {
         return Value(mapChars(s.asString(), toLower) == s.asString() &&
                      mapChars(s.asString(), toUpper) != s.asString());
       }},
  };
  auto it = methods.find(name);
  if (it == methods.end()) return Value();
  return bind(self, it->first.c_str(), it->second);
}

Value dictMethod(const Value& self, const std::string& name) {
  if (name == "get") {
    return bind(self, "get", [](Interpreter&, const Value& d, const CallArgs& a) {
      Value key = a.get("key", 0);
      const Value* v = key.isString() ? d.asDict().find(key.asString()) : nullptr;
      if (v) return *v;
      Value fallback = a.get("default", 1);
      return fallback.isUndefined() ? Value(None{}) : fallback;
    });
  }
  if (name == "items") {
    return bind(self, "items", [](Interpreter& in, const Value& d, const CallArgs&) {
      std::vector<Value> pairs;
      for (const auto& [k, v] : d.asDict().entries) pairs.push_back(Value::tuple({Value(k), v}));
      return makeList(in, std::move(pairs));
    });
  }
  if (name == "keys") {
    return bind(self, "keys", [](Interpreter& in, const Value& d, const CallArgs&) {
      std::vector<Value> keys;
      for (const auto& [k, v] : d.asDict().entries) keys.emplace_back(k);
      return makeList(in, std::move(keys));
    });
  }
  if (name == "values") {
    return bind(self, "values", [](Interpreter& in, const Value& d, const CallArgs&) {
      std::vector<Value> values;
      for (const auto& [k, v] : d.asDict().entries) values.push_back(v);
      return makeList(in, std::move(values));
    });
  }
  if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" || name == "popitem") {
    return Value::function(name, [name](Interpreter&, const CallArgs&) -> Value { refuseMutation("dict", name); });
  }
  if (name == "copy") {
    return bind(self, "copy",
                [](Interpreter&, const Value& d, const CallArgs&) { return Value::dict(d.asDict().entries); });
  }
  return Value();
}

Value listMethod(const Value& self, const std::string& name) {
  if (name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove" || name == "sort" ||
      name == "reverse" || name == "clear") {
    return Value::function(name, [name](Interpreter&, const CallArgs&) -> Value { refuseMutation("list", name); });
  }
  if (name == "index") {
    return bind(self, "index", [](Interpreter&, const Value& l, const CallArgs& a) {
      Value x = a.get("value", 0);
      const auto& items = l.asList().items;
      for (size_t i = 0; i < items.size(); i++) {
        if (equal(items[i], x)) return Value(int64_t(i));
      }
      JITLLM_FAIL(kFailed, x.repr(), " is not in list");
    });
  }
  if (name == "count") {
    return bind(self, "count", [](Interpreter&, const Value& l, const CallArgs& a) {
      Value x = a.get("value", 0);
      int64_t n = 0;
      for (const auto& item : l.asList().items) n += equal(item, x);
      return Value(n);
    });
  }
  return Value();
}

}  // namespace

std::string htmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.asList().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.asDict().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8Decode(v.asString())) chars.emplace_back(utf8Encode(std::u32string(1, c)));
      return chars;
    }
    default:
      JITLLM_FAIL(kFailed, "'", v.typeName(), "' object is not iterable");
  }
}

Value applyFilter(Interpreter& in, const std::string& name, const Value& input, const CallArgs& args) {
  in.step();
  const auto& table = filters();
  std::string canonical = name == "d" ? "default" : name == "e" ? "escape" : name;
  auto it = table.find(canonical);
  JITLLM_REQUIRE(it != table.end(), "no filter named '", name, "'");
  // Filters that read their input as text see Undefined as "" (jinja2's soft_str); the rest
  // decide for themselves.
  return it->second(in, input, args);
}

bool applyTest(Interpreter& in, const std::string& name, const Value& v, const CallArgs& args) {
  in.step();
  using K = Value::Kind;
  Value arg = args.get("", 0);
  if (name == "defined") return !v.isUndefined();
  if (name == "undefined") return v.isUndefined();
  if (name == "none") return v.isNone();
  if (name == "string") return v.isString();
  if (name == "number") return v.isNumber();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.asBool();
  if (name == "false") return v.kind() == K::kBool && !v.asBool();
  if (name == "mapping") return v.isDict();
  if (name == "iterable") return isIterable(v);
  if (name == "sequence") return v.isString() || (v.isList() && !v.asList().generator) || v.isDict();
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, arg);
  if (name == "ne" || name == "!=") return !equal(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg) < 0;
  if (name == "le" || name == "<=") return compare(v, arg) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg) >= 0;
  if (name == "in") {
    Value container = arg;
    if (container.isString()) return v.isString() && container.asString().find(v.asString()) != std::string::npos;
    for (const auto& item : iterate(container)) {
      if (equal(item, v)) return true;
    }
    return false;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    JITLLM_REQUIRE(v.kind() == K::kInt, "test '", name, "' needs an integer, got ", v.typeName());
    if (name == "odd") return v.asInt() % 2 != 0;
    if (name == "even") return v.asInt() % 2 == 0;
    int64_t d = intArg(arg, 1, "divisibleby's argument");
    JITLLM_REQUIRE(d != 0, "integer division or modulo by zero");
    return v.asInt() % d == 0;
  }
  if (name == "lower") return v.isString() && mapChars(v.asString(), toLower) == v.asString();
  if (name == "upper") return v.isString() && mapChars(v.asString(), toUpper) == v.asString();
  if (name == "sameas") {
    // Python's `is`: the singletons None, True and False compare by identity of value.
    if (v.kind() != arg.kind()) return false;
    if (v.isNone()) return true;
    if (v.kind() == K::kBool) return v.asBool() == arg.asBool();
    return equal(v, arg) && (v.kind() == K::kInt || v.isUndefined());
  }
  if (name == "escaped") return false;
  JITLLM_FAIL(kFailed, "no test named '", name, "'");
}

Value boundMethod(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kString:
      return stringMethod(object, name);
    case Value::Kind::kDict:
      return dictMethod(object, name);
    case Value::Kind::kList:
      return object.asList().generator ? Value() : listMethod(object, name);
    default:
      return Value();
  }
}

void addGlobals(std::map<std::string, Value, std::less<>>& vars) {
  vars["range"] = Value::function("range", [](Interpreter& in, const CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) {
      stop = intArg(a.positional[0], 0, "range's stop");
    } else {
      JITLLM_REQUIRE(a.positional.size() >= 2 && a.positional.size() <= 3, "range expects 1 to 3 arguments");
      start = intArg(a.positional[0], 0, "range's start");
      stop = intArg(a.positional[1], 0, "range's stop");
      if (a.positional.size() == 3) step = intArg(a.positional[2], 1, "range's step");
    }
    JITLLM_REQUIRE(step != 0, "range() arg 3 must not be zero");
    // Python's ranges are lazy; ours are lists, so an absurd one is refused, not built.
    double count = std::ceil((double(stop) - double(start)) / double(step));
    JITLLM_REQUIRE(count <= 1e6, "range of ", count, " items is too large (at most 1000000)");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
    return makeList(in, std::move(items));
  });
  vars["namespace"] = Value::function("namespace", [](Interpreter& in, const CallArgs& a) {
    auto data = std::make_shared<DictData>();
    for (const auto& p : a.positional) {
      if (p.isDict()) {
        for (const auto& [k, v] : p.asDict().entries) data->set(k, v);
      }
    }
    for (const auto& [k, v] : a.named) data->set(k, v);
    return in.makeNamespace(std::move(data));
  });
  vars["dict"] = Value::function("dict", [](Interpreter&, const CallArgs& a) {
    auto data = std::make_shared<DictData>();
    for (const auto& p : a.positional) {
      if (p.isDict()) {
        for (const auto& [k, v] : p.asDict().entries) data->set(k, v);
      }
    }
    for (const auto& [k, v] : a.named) data->set(k, v);
    return Value(std::move(data));
  });
  vars["raise_exception"] = Value::function("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
    JITLLM_FAIL(kFailed, "the template raised an exception: ", a.get("message", 0).str());
  });
  vars["strftime_now"] = Value::function("strftime_now", [](Interpreter& in, const CallArgs& a) {
    std::time_t now = in.options().now ? in.options().now : std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    const std::string fmt = stringArg(a.get("format", 0), "strftime_now's format");
    JITLLM_REQUIRE(fmt.size() <= 256, "strftime_now's format is too long");
    std::string buf(fmt.size() * 16 + 64, '\0');
    size_t n = fmt.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return Value(std::move(buf));
  });
}

}  // namespace jitllm::jinja
