// What a policy asks the scheduler to do. Each action carries the reason that jitllmctl events
// shows with it ("migrated blk.0-27 of llama3b cuda:0->cuda:1: cuda:0 at 88 °C > 85 °C").
//
// Thread-safety: plain values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/device_id.h"

namespace jitllm::policies {

enum class ActionKind {
  kMigrate,      // move units [first, last] of `model` to `target`
  kPageOut,      // move all of `model`'s weights and KV out of device memory (it stays loaded;
                 // where to is the scheduler's: no `target`)
  kParkKv,       // move the KV of `model`'s idle sessions from device memory to host RAM (`target`:
                 // the device that needs the room)
  kSplit,        // split `model`'s blocks over `devices` (tensor parallelism); one device: join them there
  kReplicate,    // a replica of `model` on `target` (data parallelism), sharing its requests
  kDropReplica,  // unload `model`, a replica (no `target`)
};

struct Action {
  ActionKind kind = ActionKind::kMigrate;
  std::string model;
  int first = 0;  // unit numbers, inclusive (kMigrate)
  int last = 0;
  std::optional<DeviceId> target;  // kMigrate, kParkKv, kReplicate
  std::string reason;
  std::vector<DeviceId> devices = {};  // kSplit: the split, the hidden state's device first

  bool operator==(const Action&) const = default;
};

}  // namespace jitllm::policies
