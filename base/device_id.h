// DeviceId: which device - a backend's name and an index, "cuda:1" - and the one grammar for
// naming devices wherever a person or a config does it: an id ("cpu:0"; "cpu" alone is "cpu:0"),
// an id with a memory cap ("cuda:0@2G"), and comma-separated lists of those ("cpu:0,vulkan:0").
// Every program parses device names here, so --devices, a config's `devices =`, a load's
// placement hint and a migration's target all accept and refuse the same text.
//
// Thread-safety: values and pure functions.
#pragma once

#include <compare>
#include <cstddef>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm {

struct DeviceId {
  // The backend's registered name ("cpu", "cuda", "vulkan"): lowercase letters and digits, first a
  // letter.
  std::string backend;
  // Its position among the backend's devices (for "cpu": any number, each a CpuDevice of its own).
  int index = 0;

  // The largest index a name may carry: far above any machine, small enough that a typo such as
  // "cuda:10000000" is refused instead of probed.
  static constexpr int kMaxIndex = 1023;

  // Error(FAILED) naming `text` unless it is BACKEND or BACKEND:N.
  static DeviceId parse(std::string_view text);
  std::string str() const { return backend + ":" + std::to_string(index); }

  friend bool operator==(const DeviceId&, const DeviceId&) = default;
  friend std::strong_ordering operator<=>(const DeviceId&, const DeviceId&) = default;
};

// Writes id.str(): error messages name devices as users do.
std::ostream& operator<<(std::ostream& out, const DeviceId& id);

// One item of a device list: an id and what the device may hand out at most (0: no cap).
struct DeviceRequest {
  DeviceId id;
  size_t memoryCap = 0;  // from "@SIZE": how tests fill a device, and how a GPU is shared
};

// "cpu:0,cuda:1@2G" -> its items, in order. Error(FAILED) naming the item for a bad id or cap, an
// empty item, or a device named twice.
std::vector<DeviceRequest> parseDeviceList(std::string_view list);

// The ids of a list, comma-joined: what parseDeviceList reads back (caps included).
std::string formatDeviceList(const std::vector<DeviceRequest>& list);

}  // namespace jitllm
