#include "policies/placement.h"

#include <algorithm>
#include <numeric>

namespace jitllm::policies {
namespace {

// Bytes this model may take on `d`.
size_t room(const PlacementDevice& d, const PlacementRequest& r) {
  const size_t reserve = size_t(r.headroom * double(d.memoryTotal));
  size_t free = d.memoryFree > reserve ? d.memoryFree - reserve : 0;
  if (d.weightsInMemory && r.maxDeviceBytes) free = std::min(free, r.maxDeviceBytes);
  return free;
}

}  // namespace

std::string mebibytes(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

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
  std::vector<bool> used(devices.size(), false);  // runs a unit: needs its activations
  size_t k = 0;
  for (size_t u = 0; u < units; u++) {
    while (k < order.size()) {
      const size_t d = size_t(order[k]);
      const size_t first = used[d] ? 0 : request.workspaceBytes;
      if (p.bytesUsed[d] + first + unitNeed(devices[d], request, u) <= room(devices[d], request)) break;
      k++;  // this device is full for the model: the next one takes the rest
    }
    if (k == order.size()) {
      // Say what the rest needs on the roomiest device, which is what the user can free.
      size_t rest = 0;
      const PlacementDevice& last = devices[size_t(order.back())];
      for (size_t v = u; v < units; v++) rest += unitNeed(last, request, v);
      p.why = "units " + std::to_string(u) + "-" + std::to_string(units - 1) + " need " + mebibytes(rest) +
              " more than the devices have free";
      p.unitDevice.clear();
      return p;
    }
    const size_t d = size_t(order[k]);
    p.unitDevice[u] = int(d);
    if (!used[d]) p.bytesUsed[d] += request.workspaceBytes;
    used[d] = true;
    p.bytesUsed[d] += unitNeed(devices[d], request, u);
  }
  p.ok = true;
  return p;
}

Placement placeStreaming(const std::vector<PlacementDevice>& devices, const PlacementRequest& request) {
  Placement p;
  const size_t units = request.weightBytes.size();
  int fastest = -1;
  for (int d : preferenceOrder(devices)) {
    if (devices[size_t(d)].weightsInMemory) {
      fastest = d;
      break;
    }
  }
  if (fastest < 0 || units < 3) {
    p.why = "no device holds weights in its memory";
    return p;
  }
  const PlacementDevice& f = devices[size_t(fastest)];
  size_t largest = 0, kv = 0;
  for (size_t u = 1; u + 1 < units; u++) {
    largest = std::max(largest, request.weightBytes[u]);
    kv += u < request.kvBytes.size() ? request.kvBytes[u] : 0;
  }
  size_t used = request.workspaceBytes + 2 * largest + kv + request.weightBytes.front() + request.weightBytes.back();
  const size_t limit = room(f, request);
  if (used > limit) {
    p.why =
        f.id.str() + " cannot hold even the head, the embedding, the KV and two stream slots (" + mebibytes(used) + ")";
    return p;
  }
  p.unitDevice.assign(units, fastest);
  p.streamed.assign(units, false);
  p.bytesUsed.assign(devices.size(), 0);
  for (size_t u = 1; u + 1 < units; u++) {
    if (used + request.weightBytes[u] <= limit) {
      used += request.weightBytes[u];
    } else {
      p.streamed[u] = true;
    }
  }
  p.bytesUsed[size_t(fastest)] = used;
  p.ok = true;
  return p;
}

}  // namespace jitllm::policies
