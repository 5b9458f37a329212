// The values a chat template computes with, and how Python would print, compare and test them.
//
// Chat templates were written against Python's jinja2, so every observable behaviour here is
// Python's: `str()` of a list is its repr (['a', 1]), True prints as "True", 1 == 1.0 == True,
// a dict remembers insertion order, an empty string is false. Lists and dicts are immutable once
// built (transformers renders in an ImmutableSandboxedEnvironment), so values share them freely;
// only a namespace() object changes after it is made ({% set ns.x = ... %}).
//
// Ownership: a Value owns what it holds through shared pointers; copies are cheap.
// Thread-safety: values are not synchronised; one render uses them on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace jitllm::jinja {

class Value;
class Interpreter;

struct ListData {
  std::vector<Value> items;
  // A Python generator (what map/select/selectattr return): iterable, but with no length and not
  // JSON-serialisable, as in jinja2 - `| list` turns it into a list.
  bool generator = false;
  // A Python tuple ((a, b), dict.items()' pairs): the same as a list but printed in parentheses.
  bool tuple = false;
};

// Insertion-ordered, as Python's dict; chat-template dicts are small, so lookups are linear.
struct DictData {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  // The argument called `name`, or the positional one at `index` (-1: keyword only); Undefined
  // when neither is given.
  Value get(std::string_view name, int index) const;
};

using NativeFunction = std::function<Value(Interpreter&, const CallArgs&)>;
struct FunctionData {
  std::string name;
  NativeFunction call;
};

// A string; `markup` marks jinja2's Markup (what `| safe` returns): adding a plain string to it
// HTML-escapes that string, a quirk some templates' output depends on.
struct Str {
  std::string text;
  bool markup = false;
};

struct Undefined {
  std::string what;  // for messages: "'messages' is undefined", "'dict object' has no attribute 'x'"
};
struct None {};
struct Namespace {
  std::shared_ptr<DictData> data;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction, kNamespace };

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(Str{std::move(s)}) {}
  Value(const char* s) : v_(Str{std::string(s)}) {}
  Value(std::shared_ptr<ListData> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<DictData> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<FunctionData> f) : v_(std::move(f)) {}
  Value(Namespace n) : v_(std::move(n)) {}

  static Value list(std::vector<Value> items, bool generator = false);
  static Value tuple(std::vector<Value> items);
  static Value dict(std::vector<std::pair<std::string, Value>> entries = {});
  static Value function(std::string name, NativeFunction call);
  static Value markup(std::string s) { return Value(Str{std::move(s), true}); }

  Kind kind() const { return Kind(v_.index()); }
  bool isUndefined() const { return kind() == Kind::kUndefined; }
  bool isNone() const { return kind() == Kind::kNone; }
  bool isString() const { return kind() == Kind::kString; }
  bool isList() const { return kind() == Kind::kList; }
  bool isDict() const { return kind() == Kind::kDict; }
  bool isNumber() const { return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool; }

  bool asBool() const { return std::get<bool>(v_); }
  int64_t asInt() const { return std::get<int64_t>(v_); }
  double asFloat() const { return std::get<double>(v_); }
  const std::string& asString() const { return std::get<Str>(v_).text; }
  bool isMarkup() const { return isString() && std::get<Str>(v_).markup; }
  const ListData& asList() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  const DictData& asDict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const FunctionData& asFunction() const { return *std::get<std::shared_ptr<FunctionData>>(v_); }
  DictData& asNamespace() const { return *std::get<Namespace>(v_).data; }
  const Undefined& asUndefined() const { return std::get<Undefined>(v_); }
  // A number as a double (bools and ints too).
  double toDouble() const;

  // Python's bool(): empty strings, lists and dicts, 0, None and Undefined are false.
  bool truthy() const;
  // Python's str() (Undefined prints as "").
  std::string str() const;
  // Python's repr(), as str() of a container shows its items.
  std::string repr() const;
  // Python's type name for messages: 'str', 'NoneType', 'dict', ...
  const char* typeName() const;

 private:
  Value(Str s) : v_(std::move(s)) {}

  std::variant<Undefined, None, bool, int64_t, double, Str, std::shared_ptr<ListData>, std::shared_ptr<DictData>,
               std::shared_ptr<FunctionData>, Namespace>
      v_;
};

// Python's ==: numbers by value across int/float/bool, containers deeply.
bool equal(const Value& a, const Value& b);
// Python's <, for numbers, strings (by code point: UTF-8 bytes order the same) and lists; throws
// for other pairs. Returns -1, 0 or 1.
int compare(const Value& a, const Value& b);
// Python's repr of a float: shortest round-trip digits, exponent outside [1e-4, 1e16).
std::string pythonFloat(double d);

// The control character the escape \b \f \n \r \t stands for (JSON and Python agree), or 0.
char controlEscape(char letter);

// UTF-8 helpers for Python's code-point semantics of len(), indexing and slicing.
std::u32string utf8Decode(std::string_view s);
std::string utf8Encode(std::u32string_view s);
size_t utf8Length(std::string_view s);

}  // namespace jitllm::jinja
