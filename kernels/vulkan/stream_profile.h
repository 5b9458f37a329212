// GPU time per kind of command on one Vulkan device, for finding where a step's time goes
// (JITLLM_VULKAN_PROFILE=1; the CUDA backend's JITLLM_CUDA_PROFILE is the same idea).
//
// The command stream writes a timestamp at the start of each command buffer and one after each
// command's barrier; a command's time is the difference to the timestamp before it, so it
// includes the barrier and the gap the GPU spends between two dispatches - what a step pays for
// the command, not just the shader's run. Nothing is synchronised beyond what the stream does:
// results are read when the stream finishes.
//
// Ownership: owns its query pool; borrows the context. Thread-safety: one thread at a time (the
// device's executor), like the stream that drives it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/vulkan/device_context.h"

namespace jitllm::vulkan {

// A pool of `count` timestamp queries, and the first `count` of its results once the work that
// writes them has completed (waits for them). The profile's and the matmul tuner's.
VkQueryPool createTimestampQueries(const DeviceContext& ctx, uint32_t count);
std::vector<uint64_t> readTimestamps(const DeviceContext& ctx, VkQueryPool pool, uint32_t count);

class StreamProfile final {
 public:
  static constexpr uint32_t kQueries = 8192;

  explicit StreamProfile(const DeviceContext& ctx);
  ~StreamProfile();
  StreamProfile(const StreamProfile&) = delete;
  StreamProfile& operator=(const StreamProfile&) = delete;

  // Room for a command buffer's start and a few commands: when false the stream must finish
  // (collect()) before recording more.
  bool hasRoom() const { return used_ + 2 <= kQueries; }
  // At the start of each command buffer.
  void begin(VkCommandBuffer cb);
  // After each command's barrier.
  void mark(VkCommandBuffer cb, std::string_view label);
  // Once everything recorded so far has completed: adds the times up and frees the queries.
  void collect();
  // One line per label, most time first.
  void report(std::FILE* out) const;

 private:
  struct Total {
    int64_t calls = 0;
    double ns = 0;
  };
  const DeviceContext& ctx_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t used_ = 0;
  bool needsReset_ = true;
  std::vector<std::string> labels_;  // per query: "" for a command buffer's start
  std::map<std::string, Total, std::less<>> totals_;
};

}  // namespace jitllm::vulkan
