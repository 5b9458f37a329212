// Placement on load, the whole decision: where a new model's units go, which idle models make room
// for it first, and whether blocks that do not fit stream through the fastest device.
//
// The daemon gathers a LoadSnapshot and carries out the LoadPlan: it pages the models a
// RoomToMake names out, in order, until that device has the bytes free; when it paged anything out
// it gathers the snapshot again - with no model offered, so one load pages out once - and plans
// again. Then it binds the model as `placement` says, or refuses the load (OVERLOADED) with its
// `why`.
//
// What it decides:
//  - the caller fixed the placement (several devices named: `fixed`): each device needs room for
//    its units; one without pages idle models out, and is refused when even that is not enough;
//  - else placeUnits (the fastest device first). When the idle models (no session, no migration,
//    no pinned unit) all making room would give a better placement - more of the model on faster
//    devices - or the only one that fits, they make room where that placement needs it, least
//    recently used first;
//  - with `stream` (spill = stream), a model that would spill past one device, or fit nowhere,
//    keeps its blocks on the fastest device that holds weights in its memory and streams the ones
//    that do not fit through it (placeStreaming).
//
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policies/placement.h"

namespace jitllm::policies {

// A resident model, as a load that needs room sees it.
struct LoadedModel {
  std::string name;
  int64_t lastUsedMs = 0;  // when a session last ran a step
  bool busy = false;       // a session running or waiting, or a migration in progress
  bool pinned = false;     // a unit pinned: it stays where it is
  // Per device of the snapshot: the bytes paging it out frees there (its weights in that device's
  // memory, its KV, and the KV it was placed with room for and does not use yet).
  std::vector<size_t> frees;
};

struct LoadSnapshot {
  std::vector<PlacementDevice> devices;  // the devices the load may use, as placement sees them
  std::vector<LoadedModel> models;       // those that might make room; none: nothing is paged out
  PlacementRequest request;
  std::vector<int> fixed;  // per unit, an index into `devices` when the caller fixed them; empty: placeUnits
  bool stream = false;     // spill = stream: blocks that do not fit stream through the fastest device
};

// Idle models to page out of one device, in this order, until `bytes` are free there.
struct RoomToMake {
  size_t device = 0;  // index into LoadSnapshot::devices
  size_t bytes = 0;
  std::vector<std::string> models;  // least recently used first
  bool operator==(const RoomToMake&) const = default;
};

struct LoadPlan {
  // Room to make first; when there is any, `placement` is not set: plan again once it is made.
  std::vector<RoomToMake> makeRoom;
  // Where each unit goes (`streamed`: the blocks that stream), or, when !ok, why the model does not
  // fit, in words that follow its name ("'llama' does not fit: ...").
  Placement placement;
  std::vector<std::string> placed;  // the model.placed events: "units 0-9 on cuda:0 (980 MiB), ..."
};

LoadPlan planLoad(const LoadSnapshot& snapshot);

// Whether `model` may be paged out to make room: idle and nothing pinned (paging it out costs no one
// a token now). The daemon asks again before each page-out, as the model is then.
bool mayMakeRoom(const LoadedModel& model);

}  // namespace jitllm::policies
