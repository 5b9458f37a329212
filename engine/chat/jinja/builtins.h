// jinja2's built-in filters and tests, Python's str/dict/list methods that templates call, and
// the globals transformers adds (raise_exception, strftime_now) - each with Python's behaviour,
// since the goldens are Python's output.
//
// Mutating methods (list.append, dict.pop, ...) fail as in transformers' immutable sandbox.
//
// Thread-safety: pure functions over their arguments; they charge `in`'s budget.
#pragma once

#include <string>

#include "engine/chat/jinja/interpreter.h"
#include "engine/chat/jinja/value.h"

namespace jitllm::jinja {

// `input | name(args)`. Error(FAILED) for an unknown filter or bad arguments.
Value applyFilter(Interpreter& in, const std::string& name, const Value& input, const CallArgs& args);
// `value is name(args)`. Error(FAILED) for an unknown test.
bool applyTest(Interpreter& in, const std::string& name, const Value& value, const CallArgs& args);
// `object.name` where it names a method of a string, dict or list: the bound method, or
// Undefined when there is no such method.
Value boundMethod(const Value& object, const std::string& name);
// markupsafe's escape(): & < > " ' as entities.
std::string htmlEscape(const std::string& s);
// The globals every render starts with.
void addGlobals(std::map<std::string, Value, std::less<>>& vars);
// Iterating a value as a for loop would (dict: its keys; string: its characters).
std::vector<Value> iterate(const Value& v);

}  // namespace jitllm::jinja
