// Placement on load: which device each unit of a model runs on, from the devices' free memory and
// speed. Decode reads every weight once per token, so a step takes about the sum over units of
// their bytes divided by their device's speed; filling the fastest device first, then the next,
// minimises it. Units stay in runs of consecutive units (one hand-off between devices per run).
//
// A unit needs its weights on devices that hold weights in their own memory (GPUs; the CPU reads
// them in place from the mapped file) plus KV for `kvTokens` of context on every device.
//
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/device_id.h"

namespace jitllm::policies {

struct PlacementDevice {
  DeviceId id;
  double speed = 0;             // relative throughput (placement probe or nominal)
  bool software = false;        // lavapipe and the like: used only when nothing else has room
  bool weightsInMemory = true;  // false: weights are read from the file (the CPU), only KV takes memory
  size_t memoryFree = 0;
  size_t memoryTotal = 0;
};

struct PlacementRequest {
  std::vector<size_t> weightBytes;  // per unit: token_embd, blk.0 .. blk.L-1, output
  std::vector<size_t> kvBytes;      // per unit: the KV reserve it needs (0 for token_embd and output)
  size_t maxDeviceBytes = 0;        // per device that holds weights: this model's cap (--max-vram); 0: none
  size_t workspaceBytes = 0;        // activations: once on every device that runs a unit
  double headroom = 0.05;           // fraction of each device's memory left free
};

struct Placement {
  bool ok = false;
  std::vector<int> unitDevice;    // per unit: index into the devices given
  std::vector<size_t> bytesUsed;  // per device given: what this placement takes there
  std::vector<bool> streamed;     // per unit: streamed through its device's memory each step
  std::string why;                // when !ok: how much is missing, in words
};

// Devices in preference order: real before software, then faster, then as given.
std::vector<int> preferenceOrder(const std::vector<PlacementDevice>& devices);

// Greedy in unit order over preferenceOrder(): each device takes units until the next does not
// fit, then the next device takes over.
Placement placeUnits(const std::vector<PlacementDevice>& devices, const PlacementRequest& request);

// For a model larger than its fastest device: the head, the embedding and as many blocks as fit
// stay on the fastest device that holds weights in its memory, every other block streams through
// it (two slots of the largest block, and the KV of every block, are reserved there). Not ok when
// that device cannot hold even that, or the model fits without streaming (placeUnits then).
Placement placeStreaming(const std::vector<PlacementDevice>& devices, const PlacementRequest& request);

// What `unit` needs on `device`.
size_t unitNeed(const PlacementDevice& device, const PlacementRequest& request, size_t unit);

// "980 MiB" (rounded up): how placement's words name sizes.
std::string mebibytes(size_t bytes);

}  // namespace jitllm::policies
