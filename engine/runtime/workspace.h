// Activation memory: each device a model runs on keeps one Workspace of buffers, sized for the
// largest microbatch seen so far and reused by every step after it, so a step allocates nothing
// once the model has run its largest shape.
//
// Ownership: Workspaces owns each device's Workspace and its DeviceBuffers; the devices must
// outlive them.
// Thread-safety: the model's step-loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/runtime/model_config.h"
#include "kernels/device.h"

namespace jitllm::runtime {

// Streamed blocks visit two device slots in turn: while one block runs from one, the next uploads
// into the other (StepExecutor).
struct StreamSlots {
  std::unique_ptr<DeviceBuffer> buffers[2];
  size_t bytes = 0;
  uint64_t freeMark[2] = {0, 0};  // the mark after the ops of the block that last used the slot
  int next = 0;                   // the slot the next upload goes to
  // The upload in flight into each slot: the unit it carries (-1: none waiting) and its ticket.
  int unit[2] = {-1, -1};
  uint64_t ticket[2] = {0, 0};
};

struct Workspace {
  Device* device = nullptr;
  int64_t capacity = 0;  // tokens
  std::unique_ptr<DeviceBuffer> x, normed, q, k, v, attn, gate, up;
  // The head's logits, in rows: decode needs one per session, scoring one per token.
  std::unique_ptr<DeviceBuffer> logits;
  int64_t logitsCapacity = 0;
  // A split block's partial sums from another device, before they are added (BlockGraph).
  std::unique_ptr<DeviceBuffer> partial;
  int64_t partialCapacity = 0;
  // ... and the shards' outputs stacked before a product that runs whole on the first device.
  std::unique_ptr<DeviceBuffer> stacked;
  size_t stackedBytes = 0;
  StreamSlots stream;

  static float* f(const std::unique_ptr<DeviceBuffer>& b) { return reinterpret_cast<float*>(b->data()); }
  // Each grows its buffer when it is too small (the old one freed first, so the device's budget
  // need not hold both) and returns it.
  float* logitsFor(int64_t rows, int64_t vocab);
  uint8_t* partialFor(int64_t tokens, size_t bytes);
  uint8_t* stackedFor(size_t bytes);
};

class Workspaces final {
 public:
  explicit Workspaces(const ModelConfig& config) : config_(config) {}
  Workspaces(const Workspaces&) = delete;
  Workspaces& operator=(const Workspaces&) = delete;

  // `device`'s workspace, with room for at least `tokens` tokens.
  Workspace& get(Device& device, int64_t tokens);
  void appendDevices(std::vector<Device*>& out) const;
  void release(Device& device) { byDevice_.erase(&device); }
  // Drops the workspaces of devices for which `inUse(device)` is false.
  template <class InUse>
  void releaseUnless(InUse inUse) {
    std::erase_if(byDevice_, [&](const auto& entry) { return !inUse(entry.first); });
  }

 private:
  const ModelConfig& config_;
  std::map<Device*, std::unique_ptr<Workspace>> byDevice_;
};

}  // namespace jitllm::runtime
