#include "engine/runtime/workspace.h"

#include <algorithm>

namespace jitllm::runtime {

float* Workspace::logitsFor(int64_t rows, int64_t vocab) {
  if (logitsCapacity < rows) {
    logits.reset();
    logits = device->allocate(size_t(rows * vocab) * sizeof(float));
    logitsCapacity = rows;
  }
  return f(logits);
}

uint8_t* Workspace::partialFor(int64_t tokens, size_t bytes) {
  if (partialCapacity < tokens) {
    partial.reset();
    partial = device->allocate(bytes);
    partialCapacity = tokens;
  }
  return partial->data();
}

uint8_t* Workspace::stackedFor(size_t bytes) {
  if (stackedBytes < bytes) {
    stacked.reset();
    stacked = device->allocate(bytes);
    stackedBytes = bytes;
  }
  return stacked->data();
}

Workspace& Workspaces::get(Device& device, int64_t tokens) {
  auto& ws = byDevice_[&device];
  if (!ws) {
    ws = std::make_unique<Workspace>();
    ws->device = &device;
  }
  if (ws->capacity < tokens) {
    const ModelConfig& c = config_;
    const size_t t = size_t(tokens);
    auto alloc = [&](int64_t width) { return device.allocate(t * size_t(width) * sizeof(float)); };
    Workspace fresh;
    fresh.device = &device;
    fresh.x = alloc(c.embedding);
    fresh.normed = alloc(std::max(c.embedding, c.heads * c.headDim));
    fresh.q = alloc(c.heads * c.headDim);
    fresh.k = alloc(c.kvHeads * c.headDim);
    fresh.v = alloc(c.kvHeads * c.headDim);
    fresh.attn = alloc(c.heads * c.headDim);
    // Also the post norms' outputs (BlockGraph), so at least embedding wide.
    fresh.gate = alloc(std::max(c.feedForward, c.embedding));
    fresh.up = alloc(std::max(c.feedForward, c.embedding));
    fresh.capacity = tokens;
    fresh.logits = std::move(ws->logits);
    fresh.logitsCapacity = ws->logitsCapacity;
    *ws = std::move(fresh);
  }
  return *ws;
}

void Workspaces::appendDevices(std::vector<Device*>& out) const {
  for (const auto& [device, ws] : byDevice_) out.push_back(device);
}

}  // namespace jitllm::runtime
