#include "daemon/server/model_name.h"

#include "base/error.h"

namespace jitllm::server {
namespace {

bool alphanumeric(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool allowed(char c) { return alphanumeric(c) || c == '.' || c == '_' || c == '-'; }

}  // namespace

std::string clipped(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "...";
}

void requireValidModelName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxModelNameLength && alphanumeric(name[0]);
  for (char c : name) ok = ok && allowed(c);
  JITLLM_REQUIRE(ok, "model name '", clipped(name), "' (", name.size(), " characters) is not allowed: use 1 to ",
                 kMaxModelNameLength, " letters, digits, '.', '_' or '-', starting with a letter or digit");
}

std::string modelNameFrom(std::string_view text) {
  std::string name;
  for (char c : text) {
    if (name.size() == kMaxModelNameLength) break;
    if (allowed(c)) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && !alphanumeric(name.back())) name.pop_back();
  return name.empty() ? "model" : name;
}

}  // namespace jitllm::server
