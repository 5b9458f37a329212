// A small reader for the tools' command lines: positional arguments and "--flag VALUE" options,
// each value parsed strictly (a number with trailing junk is an error, not a silent zero).
//
// Thread-safety: one per main().
#pragma once

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::tools {

class UsageError final : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CommandLine final {
 public:
  CommandLine(int argc, char** argv) : args_(argv + 1, argv + argc) {}

  bool done() const { return next_ >= args_.size(); }
  std::string_view peek() const { return args_[next_]; }
  std::string take() { return args_[next_++]; }

  // The value after the flag just taken.
  std::string value(std::string_view flag) {
    if (done()) throw UsageError(std::string(flag) + " needs a value");
    return take();
  }
  // The value after the flag just taken, which must be one of `allowed`.
  std::string oneOf(std::string_view flag, std::initializer_list<std::string_view> allowed) {
    const std::string v = value(flag);
    std::string list;
    for (std::string_view a : allowed) {
      if (v == a) return v;
      list += (list.empty() ? "" : " or ") + std::string(a);
    }
    throw UsageError(std::string(flag) + " takes " + list + ", not '" + v + "'");
  }
  template <typename T>
  T number(std::string_view flag) {
    const std::string v = value(flag);
    T out{};
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || p != v.data() + v.size()) {
      throw UsageError(std::string(flag) + ": '" + v + "' is not a valid number");
    }
    return out;
  }

 private:
  std::vector<std::string> args_;
  size_t next_ = 0;
};

// A tool's main(): runs `body`, turning a UsageError into "TOOL: message" plus the usage text
// and exit 2, any other exception into "TOOL: error: message" and exit 1.
int runTool(const char* tool, const char* usage, int (*body)(int, char**), int argc, char** argv);

// "1 2 3" -> {1, 2, 3}; a UsageError for anything that is not a list of integers.
std::vector<int32_t> parseTokenIds(const std::string& text);

// "1,8,32" -> {1, 8, 32}: the value of `flag`, at least one count, each in 1..max (a UsageError
// naming the flag otherwise).
std::vector<int> parseCounts(std::string_view flag, const std::string& text, int max);

}  // namespace jitllm::tools
