// Devices and a model's needs for the placement tests, in MB.
#pragma once

#include <cstddef>

#include "policies/placement.h"

namespace jitllm::policies {

constexpr size_t kMB = size_t(1) << 20;

inline PlacementDevice placementDevice(const char* id, double speed, size_t freeMB, bool weightsInMemory = true,
                                       bool software = false) {
  PlacementDevice d;
  d.id = DeviceId::parse(id);
  d.speed = speed;
  d.memoryFree = d.memoryTotal = freeMB * kMB;
  d.weightsInMemory = weightsInMemory;
  d.software = software;
  return d;
}

// token_embd, `blocks` blocks and output: 100 MB of weights each, 10 MB of KV per block.
inline PlacementRequest placementRequest(int blocks) {
  PlacementRequest r;
  r.headroom = 0;
  r.weightBytes.assign(size_t(blocks + 2), 100 * kMB);
  r.kvBytes.assign(size_t(blocks + 2), 10 * kMB);
  r.kvBytes.front() = r.kvBytes.back() = 0;
  return r;
}

}  // namespace jitllm::policies
