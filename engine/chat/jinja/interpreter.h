// Runs a parsed template (ast.h) - the evaluator behind Template::render - and the state one
// render has: scopes, the output being written, and the budget that bounds a hostile template.
// builtins.h's filters, tests and methods call back into it to charge that budget.
//
// Ownership: borrows the syntax tree, which must outlive it. Thread-safety: one render, one thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/chat/jinja/ast.h"
#include "engine/chat/jinja/template.h"
#include "engine/chat/jinja/value.h"

namespace jitllm::jinja {

class Interpreter {
 public:
  Interpreter(const RenderOptions& options, std::string& out);
  // Empties the namespaces this render made: `{% set ns.me = ns %}` is a cycle of shared
  // pointers, which would otherwise outlive the render.
  ~Interpreter();

  // Makes a namespace() object; the interpreter keeps it to break such cycles at the end.
  Value makeNamespace(std::shared_ptr<DictData> data);

  // Runs a template body in the root scope, whose variables are `context`'s and the globals.
  void run(const Body& body, const Value& context);

  // The budget: every value made counts its size; Error(FAILED) past RenderLimits.
  void chargeBytes(size_t bytes);
  void step();
  const RenderOptions& options() const { return options_; }
  int line() const { return line_; }

  // Calls a function value (macro or builtin) with evaluated arguments.
  Value call(const Value& callee, const CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::map<std::string, Value, std::less<>> vars;
    Frame* parent = nullptr;
  };
  struct DepthGuard {
    explicit DepthGuard(Interpreter& in);
    ~DepthGuard() { in.depth_--; }
    Interpreter& in;
  };

  Flow execBody(const Body& body);
  Flow exec(const Node& node);
  Flow execFor(const Node& node);
  void execSet(const Node& node);
  void defineMacro(const Node& node);
  std::string renderToString(const Body& body, Frame& frame);

  Value eval(const Expr& e);
  Value evalCall(const Expr& e);
  Value evalFilter(const Expr& e, const Value* input);
  Value evalCompare(const Expr& e);
  CallArgs evalArgs(const Expr& e);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void write(const std::string& text);

  const RenderOptions& options_;
  std::string* out_;
  std::vector<std::shared_ptr<DictData>> namespaces_;
  std::vector<std::unique_ptr<Frame>> frames_;  // owned frames; current_ points into them
  Frame* root_ = nullptr;
  Frame* current_ = nullptr;
  int64_t steps_ = 0;
  size_t allocated_ = 0;
  int depth_ = 0;
  int line_ = 0;
};

}  // namespace jitllm::jinja
