// Templates are read from GGUF files, which anyone can write: hostile ones must end in an
// Error, quickly and in bounded memory - never a crash, a hang or a runaway allocation.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "base/error.h"
#include "engine/chat/jinja/json.h"
#include "engine/chat/jinja/template.h"

namespace jitllm::jinja {
namespace {

// The error a template gives, or "" when it renders.
std::string failure(const std::string& source, RenderOptions options = {}) {
  try {
    Template::parse(source).render(parseJson(R"({"messages": [{"role": "user", "content": "hi"}]})"), options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The time bound is loose enough for ASan builds (about 5x slower); what matters is that it ends.
void expectFailsWithin(const std::string& source, const char* expected, double seconds = 30,
                       const RenderOptions& options = {}) {
  auto start = std::chrono::steady_clock::now();
  std::string e = failure(source, options);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(e.find(expected), std::string::npos) << "source: " << source.substr(0, 200) << "\nerror: " << e;
  EXPECT_LT(took, seconds) << source.substr(0, 200);
}

TEST(HostileTemplates, UnterminatedTagsAndStringsAreSyntaxErrors) {
  expectFailsWithin("abc {{ messages", "line 1: unterminated {{");
  expectFailsWithin("abc\n{% if true", "line 2: unterminated {%");
  expectFailsWithin("{# comment", "unterminated comment");
  expectFailsWithin("{{ 'abc }}", "unterminated string");
  expectFailsWithin("{% if true %}x", "never closed");
  expectFailsWithin("{% for x in y %}", "never closed");
  expectFailsWithin("{% endfor %}", "line 1: unexpected {% endfor %}");
  expectFailsWithin("{% raw %}abc", "{% raw %} without {% endraw %}");
  expectFailsWithin("{{ 1 +* 2 }}", "unexpected");
  expectFailsWithin("{{ \x01 }}", "unexpected character");
}

TEST(HostileTemplates, DeepNestingIsRefusedNotRecursedInto) {
  expectFailsWithin("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nested too deeply");
  expectFailsWithin("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}", "nested too deeply");
  std::string ifs;
  for (int i = 0; i < 5000; i++) ifs += "{% if true %}";
  expectFailsWithin(ifs, "nested too deeply");
  expectFailsWithin("{{ " + std::string(100000, '-') + "1 }}", "nested too deeply");
  expectFailsWithin("{{ x" + std::string(100000, '|').replace(0, 0, "") + " }}", "");
}

TEST(HostileTemplates, UnboundedRecursionHitsTheDepthLimit) {
  expectFailsWithin("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper than");
  expectFailsWithin("{% macro f() %}{{ f() ~ f() }}{% endmacro %}{{ f() }}", "nested deeper than");
}

TEST(HostileTemplates, HugeLoopsRunOutOfSteps) {
  // A smaller step budget than the default (5M, 2-4 s of a core in a release build) walks the same
  // code: under ASan on a busy CI machine, 5M steps took 50-100 s.
  RenderOptions fewSteps;
  fewSteps.limits.maxSteps = 200'000;
  // (Ranges of 100k, not millions: a range is a list, and building one of a million values took
  // seconds of the test under ASan.)
  expectFailsWithin("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                    "line 1: the template ran more than 200000 steps", 30, fewSteps);
  expectFailsWithin(
      "{% for i in range(100000) %}{{ i }}{% endfor %}{% for i in range(100000) %}{{ i }}{% endfor %}"
      "{% for i in range(100000) %}{{ i }}{% endfor %}",
      "ran more than 200000 steps", 30, fewSteps);
  expectFailsWithin("{% for i in range(10**12) %}{% endfor %}", "too large");
}

TEST(HostileTemplates, ExponentialStringsRunOutOfMemoryBudget) {
  expectFailsWithin(
      "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}{{ ns.s | length }}",
      "bytes of values");
  expectFailsWithin("{{ 'x' * 10**15 }}", "repetition too large");
  expectFailsWithin("{{ [1] * 10**12 }}", "repetition too large");
  expectFailsWithin("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "");
}

TEST(HostileTemplates, OutputIsBounded) {
  RenderOptions small;
  small.limits.maxOutputBytes = 1000;
  EXPECT_NE(failure("{% for i in range(1000) %}0123456789{% endfor %}", small).find("output passed 1000 bytes"),
            std::string::npos);
}

TEST(HostileTemplates, DeeplyNestedValuesCannotOverflowTheStack) {
  std::string e =
      failure("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  EXPECT_NE(e.find("nested more than"), std::string::npos) << e;
  e = failure(
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
      "{{ ns.x | tojson }}");
  EXPECT_NE(e.find("nested more than"), std::string::npos) << e;
  e = failure(
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
      "{{ ns.x == ns.x }}");
  EXPECT_NE(e.find("nested more than"), std::string::npos) << e;
  // A namespace holding itself prints without recursing.
  EXPECT_EQ(failure("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me }}{{ [ns] }}"), "");
}

TEST(HostileTemplates, JsonInputIsBoundedToo) {
  EXPECT_THROW(parseJson(std::string(100000, '[')), Error);
  EXPECT_THROW(parseJson("{\"a\": "), Error);
  EXPECT_THROW(parseJson("\"\\ud800"), Error);
}

TEST(HostileTemplates, ArithmeticEdgesAreErrorsNotUndefinedBehaviour) {
  expectFailsWithin("{{ 9223372036854775807 + 1 }}", "integer overflow");
  expectFailsWithin("{{ -9223372036854775807 - 2 }}", "integer overflow");
  expectFailsWithin("{{ 1 // 0 }}", "division or modulo by zero");
  expectFailsWithin("{{ 1 % 0 }}", "division or modulo by zero");
  expectFailsWithin("{{ 1 / 0 }}", "division by zero");
  expectFailsWithin("{{ 99999999999999999999 }}", "too large");
  expectFailsWithin("{{ 2 ** 100 }}", "integer overflow");
  expectFailsWithin("{{ [1,2][::0] }}", "slice step cannot be zero");
}

TEST(HostileTemplates, MutationAndUnknownNamesAreErrors) {
  expectFailsWithin("{% set x = [] %}{{ x.append(1) }}", "unsafe");
  expectFailsWithin("{{ messages[0].pop('role') }}", "unsafe");
  expectFailsWithin("{{ nothing.attribute }}", "'nothing' is undefined");
  expectFailsWithin("{{ nothing() }}", "'nothing' is undefined");
  expectFailsWithin("{{ 'abc' | no_such_filter }}", "no filter named 'no_such_filter'");
  expectFailsWithin("{{ 1 is no_such_test }}", "no test named 'no_such_test'");
  expectFailsWithin("{{ strftime_now('" + std::string(1000, 'x') + "') }}", "too long");
}

}  // namespace
}  // namespace jitllm::jinja
