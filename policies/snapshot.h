// What a policy sees: the devices with their telemetry, the resident models with where each unit
// runs, and the time. Built by the scheduler from the daemon's state once per tick; policies only
// read it.
//
// Thread-safety: plain values.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/device_id.h"

namespace jitllm::policies {

struct DeviceState {
  DeviceId id;                // cuda:0, vulkan:0, cpu:0
  bool software = false;      // lavapipe and the like: placed last
  double temperatureC = NAN;  // NaN: unknown (CPU devices, no NVML)
  size_t memoryTotal = 0;     // bytes the device may hand out
  size_t memoryUsed = 0;
  double speed = 0;  // relative throughput from the placement probe; 0: unknown
  // KV that resident models were placed with room for and do not use yet: free, but not for moves.
  size_t promised = 0;

  size_t memoryFree() const { return memoryUsed < memoryTotal ? memoryTotal - memoryUsed : 0; }
  double memoryFraction() const { return memoryTotal ? double(memoryUsed) / double(memoryTotal) : 0; }
};

struct UnitState {
  std::string name;                // "token_embd", "blk.3", "output"
  DeviceId device;                 // where it runs (a split block: the first of its devices)
  size_t bytes = 0;                // its weights on the device plus its KV pages there
  std::optional<DeviceId> pinned;  // the device it is pinned to; none when free to move
  size_t weightBytes = 0;          // its weights' size, wherever they are (what a move to a GPU takes)
  // A block split over devices (tensor parallelism): all of them, `device` first; empty when it
  // runs on one device. Only another tensor-parallel switch changes it.
  std::vector<DeviceId> split = {};

  // Whether a policy may move it whole: not pinned, not split.
  bool movable() const { return !pinned && split.empty(); }
  // Whether all of it runs on `id` (a split block runs on none of its devices alone).
  bool wholeOn(const DeviceId& id) const { return split.empty() && device == id; }
  // The devices it runs on: `split`, or `device` alone.
  std::vector<DeviceId> devices() const { return split.empty() ? std::vector<DeviceId>{device} : split; }
};

// The service tiers (docs/tiers.md), most urgent first: the policies' own names for the daemon's
// ServiceTier, which the scheduler maps when it builds the snapshot.
enum class Tier { kInteractive, kStandard, kBatch };

// One service tier of a model: its replies running now, and its counters since load.
struct TierState {
  Tier tier = Tier::kStandard;
  int active = 0;         // replies running or waiting for a step
  uint64_t finished = 0;  // replies that ended normally
  uint64_t met = 0;       // ... of which met both of the tier's targets
};

struct ModelState {
  std::string name;
  std::vector<UnitState> units;  // in unit order
  int activeSessions = 0;
  int64_t lastUsedMs = 0;      // when a session last ran a step (virtual clock)
  bool resident = true;        // false: its weights are paged out to host RAM or the file
  bool migrating = false;      // a migration of it is in progress: leave it alone this tick
  std::vector<DeviceId> home;  // when paged out: each unit's device before (empty otherwise)
  // KV of its idle sessions (kept after their reply for a follow-up) in device memory, per
  // device; part of the units' bytes. Parking moves it to host RAM.
  std::vector<std::pair<DeviceId, size_t>> idleKv;
  std::vector<TierState> tiers;
  std::string replicaOf;  // a replica: the model whose requests it shares ("": a model of its own)
  // The devices its blocks may be split over (tensor parallelism): among 2 and 4, those dividing
  // its KV heads and FFN rows. Empty: it does not split.
  std::vector<int> splits;

  const TierState* tier(Tier which) const {
    for (const auto& t : tiers) {
      if (t.tier == which) return &t;
    }
    return nullptr;
  }

  size_t idleKvOn(const DeviceId& device) const {
    for (const auto& [d, bytes] : idleKv) {
      if (d == device) return bytes;
    }
    return 0;
  }
};

struct Snapshot {
  int64_t nowMs = 0;  // the scheduler's clock (virtual in tests)
  std::vector<DeviceState> devices;
  std::vector<ModelState> models;

  const DeviceState* device(const DeviceId& id) const {
    for (const auto& d : devices) {
      if (d.id == id) return &d;
    }
    return nullptr;
  }
};

}  // namespace jitllm::policies
