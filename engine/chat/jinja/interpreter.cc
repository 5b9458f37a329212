#include "engine/chat/jinja/interpreter.h"

#include <cmath>
#include <optional>

#include "base/error.h"
#include "engine/chat/jinja/builtins.h"
#include "engine/chat/jinja/parser.h"

namespace jitllm::jinja {

namespace {

// A value's own size, what making it cost (its items were charged when they were made).
size_t shallowBytes(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return v.asString().size();
    case Value::Kind::kList:
      return v.asList().items.size() * sizeof(Value);
    case Value::Kind::kDict:
      return v.asDict().entries.size() * (sizeof(Value) + 32);
    default:
      return 0;
  }
}

[[noreturn]] void failUndefined(const Value& v) { JITLLM_FAIL(kFailed, v.asUndefined().what); }

// Python's ints do not overflow; ours are 64-bit, so past that is an error, not a wrap.
void requireNoOverflow(bool overflowed) { JITLLM_REQUIRE(!overflowed, "integer overflow"); }

Value arithmetic(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  if (a.isUndefined()) failUndefined(a);
  if (b.isUndefined()) failUndefined(b);
  auto typeError = [&]() -> Value {
    if (op == "+" && a.isString()) {
      JITLLM_FAIL(kFailed, "can only concatenate str (not \"", b.typeName(), "\") to str");
    }
    if (op == "+" && a.isList()) {
      JITLLM_FAIL(kFailed, "can only concatenate list (not \"", b.typeName(), "\") to list");
    }
    JITLLM_FAIL(kFailed, "unsupported operand type(s) for ", op, ": '", a.typeName(), "' and '", b.typeName(), "'");
  };
  if (a.isNumber() && b.isNumber()) {
    bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    if (ints) {
      int64_t x = a.kind() == Value::Kind::kBool ? a.asBool() : a.asInt();
      int64_t y = b.kind() == Value::Kind::kBool ? b.asBool() : b.asInt();
      int64_t r = 0;
      if (op == "+" || op == "-" || op == "*") {
        requireNoOverflow(op == "+"   ? __builtin_add_overflow(x, y, &r)
                          : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                      : __builtin_mul_overflow(x, y, &r));
        return Value(r);
      }
      if (op == "//" || op == "%") {
        JITLLM_REQUIRE(y != 0, "integer division or modulo by zero");
        JITLLM_REQUIRE(!(x == INT64_MIN && y == -1), "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
          q--;
          m += y;
        }
        return Value(op == "//" ? q : m);
      }
      if (op == "**" && y >= 0) {
        int64_t result = 1;
        for (int64_t i = 0; i < y; i++) {
          in.step();
          requireNoOverflow(__builtin_mul_overflow(result, x, &result));
          if (result == 0 || result == 1) break;
        }
        return Value(result);
      }
    }
    double x = a.toDouble(), y = b.toDouble();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      JITLLM_REQUIRE(y != 0, "division by zero");
      return Value(x / y);
    }
    if (op == "//") {
      JITLLM_REQUIRE(y != 0, "float floor division by zero");
      return Value(std::floor(x / y));
    }
    if (op == "%") {
      JITLLM_REQUIRE(y != 0, "float modulo");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    if (op == "**") return Value(std::pow(x, y));
    return typeError();
  }
  if (op == "+") {
    if (a.isMarkup() != b.isMarkup() && a.isString() && b.isString()) {
      // Markup + str escapes the plain side and stays Markup (markupsafe).
      std::string left = a.isMarkup() ? a.asString() : htmlEscape(a.asString());
      std::string right = b.isMarkup() ? b.asString() : htmlEscape(b.asString());
      in.chargeBytes(left.size() + right.size());
      return Value::markup(left + right);
    }
    if (a.isString() && b.isString()) {
      if (a.isMarkup()) return Value::markup(a.asString() + b.asString());
      in.chargeBytes(a.asString().size() + b.asString().size());
      return Value(a.asString() + b.asString());
    }
    if (a.isList() && b.isList() && !a.asList().generator && !b.asList().generator) {
      std::vector<Value> items = a.asList().items;
      items.insert(items.end(), b.asList().items.begin(), b.asList().items.end());
      in.chargeBytes(items.size() * sizeof(Value));
      return Value::list(std::move(items));
    }
    return typeError();
  }
  if (op == "*") {
    const Value& seq = a.isNumber() ? b : a;
    const Value& count = a.isNumber() ? a : b;
    if (count.kind() != Value::Kind::kInt && count.kind() != Value::Kind::kBool) return typeError();
    int64_t n = std::max<int64_t>(0, count.kind() == Value::Kind::kBool ? count.asBool() : count.asInt());
    if (seq.isString()) {
      size_t bytes = seq.asString().size();
      JITLLM_REQUIRE(bytes == 0 || uint64_t(n) <= (1ull << 40) / bytes, "string repetition too large");
      in.chargeBytes(bytes * size_t(n));
      std::string out;
      for (int64_t i = 0; i < n; i++) out += seq.asString();
      return Value(std::move(out));
    }
    if (seq.isList() && !seq.asList().generator) {
      size_t len = seq.asList().items.size();
      JITLLM_REQUIRE(len == 0 || uint64_t(n) <= (1ull << 32) / len, "list repetition too large");
      in.chargeBytes(len * size_t(n) * sizeof(Value));
      std::vector<Value> items;
      for (int64_t i = 0; i < n; i++) items.insert(items.end(), seq.asList().items.begin(), seq.asList().items.end());
      return Value::list(std::move(items));
    }
    return typeError();
  }
  if (op == "%" && a.isString())
    return applyFilter(in, "format", a, CallArgs{b.isList() ? b.asList().items : std::vector<Value>{b}, {}});
  return typeError();
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      JITLLM_REQUIRE(item.isString(), "'in <string>' requires string as left operand, not ", item.typeName());
      return container.asString().find(item.asString()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.asList().items) {
        if (equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.isString() && container.asDict().find(item.asString()) != nullptr;
    case Value::Kind::kNamespace:
      return item.isString() && container.asNamespace().find(item.asString()) != nullptr;
    default:
      JITLLM_FAIL(kFailed, "argument of type '", container.typeName(), "' is not iterable");
  }
}

const char* objectName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kDict:
      return "'dict object'";
    case Value::Kind::kList:
      return "'list object'";
    case Value::Kind::kString:
      return "'str object'";
    case Value::Kind::kNone:
      return "'None'";
    default:
      return "the value";
  }
}

Value attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      failUndefined(object);
    case Value::Kind::kDict: {
      // jinja2 tries Python's attribute first: `d.items` is the method, even with an "items" key.
      Value method = boundMethod(object, name);
      if (!method.isUndefined()) return method;
      if (const Value* v = object.asDict().find(name)) return *v;
      break;
    }
    case Value::Kind::kNamespace:
      if (const Value* v = object.asNamespace().find(name)) return *v;
      break;
    case Value::Kind::kString:
    case Value::Kind::kList: {
      Value method = boundMethod(object, name);
      if (!method.isUndefined()) return method;
      break;
    }
    default:
      break;
  }
  return Value(Undefined{std::string(objectName(object)) + " has no attribute '" + name + "'"});
}

Value subscript(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      failUndefined(object);
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      if (key.isString()) {
        const DictData& d = object.isDict() ? object.asDict() : object.asNamespace();
        if (const Value* v = d.find(key.asString())) return *v;
        if (object.isDict()) {
          Value method = boundMethod(object, key.asString());
          if (!method.isUndefined()) return method;
        }
      }
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.kind() == Value::Kind::kInt) {
        int64_t i = key.asInt();
        if (object.isList()) {
          JITLLM_REQUIRE(!object.asList().generator, "'generator' object is not subscriptable");
          int64_t n = int64_t(object.asList().items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return object.asList().items[size_t(i)];
        } else {
          std::u32string s = utf8Decode(object.asString());
          int64_t n = int64_t(s.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value(utf8Encode(s.substr(size_t(i), 1)));
        }
      } else if (key.isString()) {
        return attribute(object, key.asString());
      }
      break;
    default:
      break;
  }
  return Value(Undefined{std::string(objectName(object)) + " has no element " + key.repr()});
}

// Python's slice semantics (PySlice_AdjustIndices) over `n` items.
std::vector<int64_t> sliceIndices(int64_t n, const Value& startV, const Value& stopV, const Value& stepV) {
  auto asIndex = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.isUndefined() || v.isNone()) return std::nullopt;
    JITLLM_REQUIRE(v.kind() == Value::Kind::kInt, "slice ", what, " must be an integer or None");
    return v.asInt();
  };
  int64_t step = asIndex(stepV, "step").value_or(1);
  JITLLM_REQUIRE(step != 0, "slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = clamp(asIndex(startV, "start"), step < 0 ? n - 1 : 0);
  int64_t stop = clamp(asIndex(stopV, "stop"), step < 0 ? -1 : n);
  std::vector<int64_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

}  // namespace

Interpreter::DepthGuard::DepthGuard(Interpreter& in) : in(in) {
  JITLLM_REQUIRE(++in.depth_ <= in.options_.limits.maxDepth, "nested deeper than ", in.options_.limits.maxDepth,
                 " levels (statements, expressions and macro calls)");
}

Interpreter::Interpreter(const RenderOptions& options, std::string& out) : options_(options), out_(&out) {}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->entries.clear();
}

Value Interpreter::makeNamespace(std::shared_ptr<DictData> data) {
  namespaces_.push_back(data);
  return Value(Namespace{std::move(data)});
}

void Interpreter::step() {
  JITLLM_REQUIRE(++steps_ <= options_.limits.maxSteps, "the template ran more than ", options_.limits.maxSteps,
                 " steps");
}

void Interpreter::chargeBytes(size_t bytes) {
  allocated_ += bytes;
  JITLLM_REQUIRE(allocated_ <= options_.limits.maxAllocatedBytes, "the template built more than ",
                 options_.limits.maxAllocatedBytes, " bytes of values");
}

void Interpreter::write(const std::string& text) {
  JITLLM_REQUIRE(out_->size() + text.size() <= options_.limits.maxOutputBytes, "the output passed ",
                 options_.limits.maxOutputBytes, " bytes");
  chargeBytes(text.size());
  *out_ += text;
}

void Interpreter::run(const Body& body, const Value& context) {
  Frame root;
  addGlobals(root.vars);
  if (context.isDict()) {
    for (const auto& [k, v] : context.asDict().entries) root.vars[k] = v;
  }
  root_ = current_ = &root;
  try {
    Flow flow = execBody(body);
    (void)flow;  // a stray {% break %} outside a loop ends the template, as jinja2 refuses it at parse
  } catch (...) {
    root_ = current_ = nullptr;
    throw;
  }
  root_ = current_ = nullptr;
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Frame* f = current_; f; f = f->parent) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  return Value(Undefined{"'" + name + "' is undefined"});
}

void Interpreter::assign(const std::string& name, Value value) { current_->vars[name] = std::move(value); }

Interpreter::Flow Interpreter::execBody(const Body& body) {
  for (const auto& node : body) {
    Flow f = exec(*node);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

std::string Interpreter::renderToString(const Body& body, Frame& frame) {
  std::string buffer;
  std::string* savedOut = out_;
  Frame* savedFrame = current_;
  out_ = &buffer;
  current_ = &frame;
  try {
    execBody(body);
  } catch (...) {
    out_ = savedOut;
    current_ = savedFrame;
    throw;
  }
  out_ = savedOut;
  current_ = savedFrame;
  return buffer;
}

Interpreter::Flow Interpreter::exec(const Node& node) {
  DepthGuard guard(*this);
  step();
  line_ = node.line;
  switch (node.kind) {
    case Node::Kind::kText:
      write(node.text);
      return Flow::kNormal;
    case Node::Kind::kPrint:
      write(eval(*node.expr).str());
      return Flow::kNormal;
    case Node::Kind::kIf:
      for (const auto& [cond, body] : node.branches) {
        if (eval(*cond).truthy()) return execBody(body);
      }
      return execBody(node.elseBody);
    case Node::Kind::kFor:
      return execFor(node);
    case Node::Kind::kSet:
      execSet(node);
      return Flow::kNormal;
    case Node::Kind::kSetBlock: {
      Frame frame{{}, current_};
      Value v(renderToString(node.body, frame));
      if (node.expr) v = evalFilter(*node.expr, &v);
      assign(node.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      defineMacro(node);
      return Flow::kNormal;
    case Node::Kind::kFilterBlock: {
      Frame frame{{}, current_};
      Value v(renderToString(node.body, frame));
      write(evalFilter(*node.expr, &v).str());
      return Flow::kNormal;
    }
    case Node::Kind::kScope: {
      Frame frame{{}, current_};
      write(renderToString(node.body, frame));
      return Flow::kNormal;
    }
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::execFor(const Node& node) {
  Value iterable = eval(*node.expr);
  std::vector<Value> items = iterate(iterable);
  Frame frame{{}, current_};
  Frame* saved = current_;
  current_ = &frame;
  auto bind = [&](const Value& item) {
    if (node.targets.size() == 1) {
      frame.vars[node.targets[0]] = item;
      return;
    }
    std::vector<Value> parts = iterate(item);
    JITLLM_REQUIRE(parts.size() == node.targets.size(), "cannot unpack ", parts.size(), " values into ",
                   node.targets.size(), " loop variables");
    for (size_t i = 0; i < parts.size(); i++) frame.vars[node.targets[i]] = parts[i];
  };
  try {
    if (node.condition) {  // {% for x in xs if cond %}: the loop (and loop.length) sees only what passes
      std::vector<Value> kept;
      for (const auto& item : items) {
        step();
        bind(item);
        if (eval(*node.condition).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; i++) {
      step();
      // Each iteration starts from the loop's scope afresh: what the body sets does not carry over.
      frame.vars.clear();
      bind(items[size_t(i)]);
      std::vector<Value> cycleOwner;
      Value loop = Value::dict({
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"depth", Value(1)},
          {"depth0", Value(0)},
          {"previtem", i > 0 ? items[size_t(i - 1)] : Value(Undefined{"there is no previous item"})},
          {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value(Undefined{"there is no next item"})},
          {"cycle", Value::function("loop.cycle",
                                    [i](Interpreter&, const CallArgs& args) -> Value {
                                      JITLLM_REQUIRE(!args.positional.empty(), "no items for cycling given");
                                      return args.positional[size_t(i) % args.positional.size()];
                                    })},
      });
      frame.vars["loop"] = loop;
      Flow f = execBody(node.body);
      if (f == Flow::kBreak) break;
    }
    if (n == 0) {
      frame.vars.clear();
      execBody(node.elseBody);
    }
  } catch (...) {
    current_ = saved;
    throw;
  }
  current_ = saved;
  return Flow::kNormal;
}

void Interpreter::execSet(const Node& node) {
  Value v = eval(*node.expr);
  if (!node.attribute.empty()) {
    Value ns = lookup(node.targets[0]);
    JITLLM_REQUIRE(ns.kind() == Value::Kind::kNamespace, "cannot assign attribute on non-namespace object '",
                   node.targets[0], "'");
    ns.asNamespace().set(node.attribute, std::move(v));
    return;
  }
  if (node.targets.size() == 1) {
    assign(node.targets[0], std::move(v));
    return;
  }
  std::vector<Value> parts = iterate(v);
  JITLLM_REQUIRE(parts.size() == node.targets.size(), "cannot unpack ", parts.size(), " values into ",
                 node.targets.size(), " names");
  for (size_t i = 0; i < parts.size(); i++) assign(node.targets[i], parts[i]);
}

void Interpreter::defineMacro(const Node& node) {
  const Node* macro = &node;
  assign(node.name, Value::function(node.name, [macro](Interpreter& in, const CallArgs& args) -> Value {
           // A macro sees its parameters and the template's top-level names, not its caller's locals.
           Frame frame{{}, in.root_};
           std::vector<Value> extra;
           for (size_t i = 0; i < args.positional.size(); i++) {
             if (i < macro->params.size()) {
               frame.vars[macro->params[i].first] = args.positional[i];
             } else {
               extra.push_back(args.positional[i]);
             }
           }
           std::vector<std::pair<std::string, Value>> extraNamed;
           for (const auto& [k, v] : args.named) {
             bool isParam = false;
             for (const auto& p : macro->params) isParam = isParam || p.first == k;
             if (isParam) {
               frame.vars[k] = v;
             } else {
               extraNamed.emplace_back(k, v);
             }
           }
           JITLLM_REQUIRE(extraNamed.empty(), "macro '", macro->name, "' takes no keyword argument '",
                          extraNamed.empty() ? "" : extraNamed[0].first, "'");
           JITLLM_REQUIRE(extra.empty(), "macro '", macro->name, "' takes not more than ", macro->params.size(),
                          " argument(s)");
           Frame* saved = in.current_;
           in.current_ = &frame;
           try {
             for (const auto& [name, def] : macro->params) {
               if (frame.vars.count(name)) continue;
               frame.vars[name] = def ? in.eval(*def) : Value(Undefined{"'" + name + "' is undefined"});
             }
           } catch (...) {
             in.current_ = saved;
             throw;
           }
           in.current_ = saved;
           int savedLine = in.line_;
           std::string text = in.renderToString(macro->body, frame);
           in.line_ = savedLine;
           return Value(std::move(text));
         }));
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.isUndefined()) failUndefined(callee);
  JITLLM_REQUIRE(callee.kind() == Value::Kind::kFunction, "'", callee.typeName(), "' object is not callable");
  DepthGuard guard(*this);
  Value result = callee.asFunction().call(*this, args);
  chargeBytes(shallowBytes(result));
  return result;
}

CallArgs Interpreter::evalArgs(const Expr& e) {
  CallArgs args;
  for (const auto& a : e.items) args.positional.push_back(eval(*a));
  for (const auto& [k, v] : e.named) args.named.emplace_back(k, eval(*v));
  return args;
}

Value Interpreter::evalFilter(const Expr& e, const Value* input) {
  Value in = input ? *input : eval(*e.a);
  CallArgs args = evalArgs(e);
  Value result = applyFilter(*this, e.name, in, args);
  chargeBytes(shallowBytes(result));
  return result;
}

Value Interpreter::evalCompare(const Expr& e) {
  Value left = eval(*e.a);
  for (size_t i = 0; i < e.ops.size(); i++) {
    Value right = eval(*e.items[i]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") {
      ok = equal(left, right);
    } else if (op == "!=") {
      ok = !equal(left, right);
    } else if (op == "in" || op == "not in") {
      ok = contains(right, left) == (op == "in");
    } else {
      if (left.isUndefined()) failUndefined(left);
      if (right.isUndefined()) failUndefined(right);
      int c = compare(left, right);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval(const Expr& e) {
  DepthGuard guard(*this);
  step();
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList: {
      std::vector<Value> items;
      for (const auto& i : e.items) items.push_back(eval(*i));
      chargeBytes(items.size() * sizeof(Value));
      return e.negated ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::kDict: {
      auto d = std::make_shared<DictData>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value key = eval(*e.items[i]);
        JITLLM_REQUIRE(key.isString(), "dict keys must be strings here, not ", key.typeName());
        d->set(key.asString(), eval(*e.items[i + 1]));
      }
      chargeBytes(d->entries.size() * (sizeof(Value) + 32));
      return Value(std::move(d));
    }
    case Expr::Kind::kAttribute:
      return attribute(eval(*e.a), e.name);
    case Expr::Kind::kSubscript: {
      Value object = eval(*e.a);
      return subscript(object, eval(*e.b));
    }
    case Expr::Kind::kSlice: {
      Value object = eval(*e.a);
      Value parts[3];
      for (int i = 0; i < 3; i++) {
        if (e.items[size_t(i)]) parts[i] = eval(*e.items[size_t(i)]);
      }
      if (object.isUndefined()) failUndefined(object);
      if (object.isList() && !object.asList().generator) {
        const auto& items = object.asList().items;
        std::vector<Value> out;
        for (int64_t i : sliceIndices(int64_t(items.size()), parts[0], parts[1], parts[2]))
          out.push_back(items[size_t(i)]);
        chargeBytes(out.size() * sizeof(Value));
        return Value::list(std::move(out));
      }
      if (object.isString()) {
        std::u32string s = utf8Decode(object.asString()), out;
        for (int64_t i : sliceIndices(int64_t(s.size()), parts[0], parts[1], parts[2])) out += s[size_t(i)];
        chargeBytes(out.size());
        return Value(utf8Encode(out));
      }
      JITLLM_FAIL(kFailed, "'", object.typeName(), "' object is not subscriptable");
    }
    case Expr::Kind::kCall: {
      Value callee = eval(*e.a);
      CallArgs args = evalArgs(e);
      return call(callee, args);
    }
    case Expr::Kind::kFilter:
      return evalFilter(e, nullptr);
    case Expr::Kind::kTest: {
      // `x.y is defined` with x itself undefined still fails, as in jinja2; only the last step may be.
      Value v = eval(*e.a);
      CallArgs args = evalArgs(e);
      return Value(applyTest(*this, e.name, v, args) != e.negated);
    }
    case Expr::Kind::kNegate: {
      Value v = eval(*e.a);
      if (v.isUndefined()) failUndefined(v);
      if (v.kind() == Value::Kind::kFloat) return Value(-v.asFloat());
      JITLLM_REQUIRE(v.isNumber(), "bad operand type for unary -: '", v.typeName(), "'");
      int64_t i = v.kind() == Value::Kind::kBool ? v.asBool() : v.asInt();
      JITLLM_REQUIRE(i != INT64_MIN, "integer overflow");
      return Value(-i);
    }
    case Expr::Kind::kBinary: {
      Value a = eval(*e.a);
      Value b = eval(*e.b);
      Value result = arithmetic(*this, e.name, a, b);
      chargeBytes(shallowBytes(result));
      return result;
    }
    case Expr::Kind::kCompare:
      return evalCompare(e);
    case Expr::Kind::kAnd: {
      Value a = eval(*e.a);
      return a.truthy() ? eval(*e.b) : a;
    }
    case Expr::Kind::kOr: {
      Value a = eval(*e.a);
      return a.truthy() ? a : eval(*e.b);
    }
    case Expr::Kind::kNot:
      return Value(!eval(*e.a).truthy());
    case Expr::Kind::kConditional:
      if (eval(*e.a).truthy()) return eval(*e.b);
      return e.c ? eval(*e.c) : Value(Undefined{"the conditional expression had no else branch"});
  }
  return Value();
}

struct Template::Program {
  Body body;
};

Template Template::parse(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->body = parseTemplate(source);
  Template t;
  t.program_ = std::move(program);
  return t;
}

std::string Template::render(const Value& context, const RenderOptions& options) const {
  std::string out;
  Interpreter in(options, out);
  try {
    in.run(program_->body, context);
  } catch (const Error& e) {
    JITLLM_FAIL(kFailed, "line ", in.line(), ": ", e.what());
  }
  return out;
}

}  // namespace jitllm::jinja
