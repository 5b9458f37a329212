#include "tools/command_line.h"

#include <cstdio>
#include <sstream>

namespace jitllm::tools {

std::vector<int32_t> parseTokenIds(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n')) i++;
    if (i == text.size()) break;
    int32_t id = 0;
    auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), id);
    if (ec != std::errc() || (p != text.data() + text.size() && *p != ' ' && *p != ',' && *p != '\t' && *p != '\n')) {
      throw UsageError("token ids must be integers separated by spaces: '" + text + "'");
    }
    ids.push_back(id);
    i = size_t(p - text.data());
  }
  return ids;
}

std::vector<int> parseCounts(std::string_view flag, const std::string& text, int max) {
  std::vector<int> out;
  for (int32_t v : parseTokenIds(text)) {
    if (v < 1 || v > max) throw UsageError(std::string(flag) + " takes counts from 1 to " + std::to_string(max));
    out.push_back(v);
  }
  if (out.empty()) throw UsageError(std::string(flag) + " takes at least one count");
  return out;
}

int runTool(const char* tool, const char* usage, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%s", tool, e.what(), usage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace jitllm::tools
