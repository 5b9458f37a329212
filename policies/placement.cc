#include "policies/placement.h"

#include <algorithm>
#include <numeric>

namespace jitllm::policies {
namespace {

std::string mib(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

// Bytes this model may take on `d`.
size_t room(const PlacementDevice& d, const PlacementRequest& r) {
  const size_t reserve = size_t(r.headroom * double(d.memoryTotal));
  size_t free = d.memoryFree > reserve ? d.memoryFree - reserve : 0;
  if (d.weightsInMemory && r.maxDeviceBytes) free = std::min(free, r.maxDeviceBytes);
  return free;
}

}  // namespace

size_t unitNeed(const PlacementDevice& device, const PlacementRequest& request, size_t unit) {
  const size_t kv = unit < request.kvBytes.size() ? request.kvBytes[unit] : 0;
  return (device.weightsInMemory ? request.weightBytes[unit] : 0) + kv;
}

std::vector<int> preferenceOrder(const std::vector<PlacementDevice>& devices) {
  std::vector<int> order(devices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const PlacementDevice& x = devices[size_t(a)];
    const PlacementDevice& y = devices[size_t(b)];
    if (x.software != y.software) return !x.software;
    return x.speed > y.speed;
  });
  return order;
}

Placement placeUnits(const std::vector<PlacementDevice>& devices, const PlacementRequest& request) {
  Placement p;
  const size_t units = request.weightBytes.size();
  p.unitDevice.assign(units, -1);
  p.bytesUsed.assign(devices.size(), 0);
  if (devices.empty()) {
    p.why = "there is no device to place it on";
    return p;
  }
  const std::vector<int> order = preferenceOrder(devices);
  size_t k = 0;
  for (size_t u = 0; u < units; u++) {
    while (k < order.size()) {
      const size_t d = size_t(order[k]);
      if (p.bytesUsed[d] + unitNeed(devices[d], request, u) <= room(devices[d], request)) break;
      k++;  // this device is full for the model: the next one takes the rest
    }
    if (k == order.size()) {
      // Say what the rest needs on the roomiest device, which is what the user can free.
      size_t rest = 0;
      const PlacementDevice& last = devices[size_t(order.back())];
      for (size_t v = u; v < units; v++) rest += unitNeed(last, request, v);
      p.why = "units " + std::to_string(u) + "-" + std::to_string(units - 1) + " need " + mib(rest) +
              " more than the devices have free";
      p.unitDevice.clear();
      return p;
    }
    const size_t d = size_t(order[k]);
    p.unitDevice[u] = int(d);
    p.bytesUsed[d] += unitNeed(devices[d], request, u);
  }
  p.ok = true;
  return p;
}

}  // namespace jitllm::policies
