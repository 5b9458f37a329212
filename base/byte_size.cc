#include "base/byte_size.h"

#include <charconv>
#include <cstdio>
#include <limits>

namespace jitllm {

std::optional<size_t> parseByteSize(std::string_view text) {
  size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  std::string_view suffix(end, size_t(text.data() + text.size() - end));
  if (suffix.ends_with("iB")) {
    suffix.remove_suffix(2);
  } else if (suffix.size() > 1 && suffix.ends_with("B")) {
    suffix.remove_suffix(1);
  }
  int shift = 0;
  if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (suffix == "T") {
    shift = 40;
  } else if (!suffix.empty() && suffix != "B") {
    return std::nullopt;
  }
  if (value > (std::numeric_limits<size_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::string humanBytes(size_t bytes) {
  char buf[32];
  if (bytes < 1000000) {
    std::snprintf(buf, sizeof buf, "%.1f KB", double(bytes) / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / 1e6);
  }
  return buf;
}

}  // namespace jitllm
