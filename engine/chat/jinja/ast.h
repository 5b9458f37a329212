// The syntax tree of a parsed template: expressions (Expr) and statements (Node).
//
// One generic node per family keeps the parser and interpreter short; which fields a node uses
// depends on its kind, as listed beside each field.
//
// Ownership: each node owns its children. Thread-safety: immutable after parsing, so many renders
// may read one tree at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja/value.h"

namespace jitllm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using NamedArgs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    kLiteral,      // value
    kName,         // name
    kList,         // items (negated: a tuple)
    kDict,         // items: key, value, key, value, ...
    kAttribute,    // a.name
    kSubscript,    // a[b]
    kSlice,        // a[items[0]:items[1]:items[2]] (null parts left out)
    kCall,         // a(items..., named...)
    kFilter,       // a | name(items..., named...); a is null in {% filter name %}
    kTest,         // a is [not] name(items...)
    kNegate,       // -a
    kBinary,       // a name b: + - * / // % ** ~
    kCompare,      // a ops[0] items[0] ops[1] items[1] ...: == != < <= > >= in "not in"
    kAnd,          // a and b
    kOr,           // a or b
    kNot,          // not a
    kConditional,  // b if a else c (c may be null)
  };
  Kind kind;
  int line;
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  NamedArgs named;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,         // text
    kPrint,        // {{ expr }}
    kIf,           // branches (condition, body) in order; elseBody
    kFor,          // for targets in expr [if condition]: body [else elseBody]
    kSet,          // set targets = expr; or set targets[0].attribute = expr
    kSetBlock,     // set targets[0] %}body{% endset
    kMacro,        // macro name(params): body
    kFilterBlock,  // filter expr (a kFilter with a null input): body
    kScope,        // body in its own scope ({% generation %})
    kBreak,
    kContinue,
  };
  Kind kind;
  int line;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, elseBody;
  std::vector<std::string> targets;
  std::string attribute;
  std::string name;
  NamedArgs params;  // macro parameters, each with its default (null: none)
};

}  // namespace jitllm::jinja
