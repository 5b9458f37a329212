#include "base/device_id.h"

#include <charconv>
#include <ostream>
#include <string>

#include "base/byte_size.h"
#include "base/error.h"

namespace jitllm {
namespace {

// How errors quote what they were given: at most 80 characters.
std::string shown(std::string_view text) {
  return text.size() <= 80 ? std::string(text) : std::string(text.substr(0, 80)) + "...";
}

bool validBackendName(std::string_view name) {
  if (name.empty() || name.size() > 32 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

}  // namespace

DeviceId DeviceId::parse(std::string_view text) {
  const size_t colon = text.find(':');
  DeviceId id;
  id.backend = std::string(text.substr(0, colon));
  JITLLM_REQUIRE(validBackendName(id.backend), "device '", shown(text),
                 "': expected BACKEND:N such as cpu:0, cuda:1 or vulkan:0");
  if (colon == std::string_view::npos) return id;
  const char* b = text.data() + colon + 1;
  const char* e = text.data() + text.size();
  const auto [p, ec] = std::from_chars(b, e, id.index);
  // from_chars takes no sign and no spaces; "07" is refused so that one device has one name.
  JITLLM_REQUIRE(
      ec == std::errc() && p == e && b != e && !(e - b > 1 && *b == '0') && id.index >= 0 && id.index <= kMaxIndex,
      "device '", text, "': the index must be a whole number from 0 to ", kMaxIndex);
  return id;
}

std::ostream& operator<<(std::ostream& out, const DeviceId& id) { return out << id.backend << ':' << id.index; }

std::vector<DeviceRequest> parseDeviceList(std::string_view list) {
  std::vector<DeviceRequest> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    std::string_view item =
        list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? list.size() + 1 : comma + 1;
    JITLLM_REQUIRE(!item.empty(), "device list '", shown(list), "': an empty item (expected e.g. cpu:0,cuda:0)");
    DeviceRequest r;
    if (const size_t at = item.find('@'); at != std::string_view::npos) {
      const auto cap = parseByteSize(item.substr(at + 1));
      JITLLM_REQUIRE(cap && *cap > 0, "device '", shown(item), "': after '@' comes a memory cap such as 512M or 2G");
      r.memoryCap = *cap;
      item = item.substr(0, at);
    }
    r.id = DeviceId::parse(item);
    for (const DeviceRequest& earlier : out) {
      JITLLM_REQUIRE(earlier.id != r.id, "device '", r.id.str(), "' is named twice");
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string formatDeviceList(const std::vector<DeviceRequest>& list) {
  std::string out;
  for (const DeviceRequest& r : list) {
    if (!out.empty()) out += ",";
    out += r.id.str();
    if (r.memoryCap) out += "@" + std::to_string(r.memoryCap);
  }
  return out;
}

}  // namespace jitllm
