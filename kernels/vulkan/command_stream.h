// The ordered stream of work on one Vulkan device: command buffers recorded in call order, each
// command ordered after everything before it (ops see their predecessors' results, as the Device
// interface promises), submissions tracked by one timeline semaphore, and an upload arena - a
// host-visible buffer with a device address where each op puts the small host-side data it
// brings along (token ids, KV slots, page tables, RoPE tables) and copies stage their bytes.
//
// The ordering is one memory barrier in front of each command, from the stages and writes of the
// commands since the last barrier to what this command does (a shader or a copy), and one to the
// host at the end of each submission. Not a barrier with every stage and the host after each
// command: on NVIDIA's driver that one cost ~4 us a command, more than the 1B shape's decode
// spends in shaders (docs/vulkan.md).
//
// Recording does not wait: every kCommandsPerSubmit commands the stream submits what it has so
// the device starts while the host records more. finish() submits and waits for everything and
// only then recycles the arena, so upload space stays valid until the work reading it is done.
// Rule for callers: one op makes one upload() call (upload may finish() first when the arena is
// full, which invalidates earlier uploads of the same op).
//
// Ownership: owns its command pool, buffers, semaphore and arena; borrows the context.
// Thread-safety: one thread at a time (the device's executor).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/vulkan/device_context.h"
#include "kernels/vulkan/memory_pool.h"
#include "kernels/vulkan/stream_profile.h"

namespace jitllm::vulkan {

class CommandStream final {
 public:
  // Enough to keep a GPU busy while the host records the next batch, few enough that the first
  // commands of a step start early.
  static constexpr int kCommandsPerSubmit = 64;

  CommandStream(const DeviceContext& ctx, uint32_t arenaMemoryType, VkDeviceSize arenaBytes);
  ~CommandStream();
  CommandStream(const CommandStream&) = delete;
  CommandStream& operator=(const CommandStream&) = delete;

  enum class Work { kShader, kCopy };
  // Timestamps of `pool` (a VK_QUERY_TYPE_TIMESTAMP pool): reset, and written once every command
  // recorded so far has completed. For timing a few commands (MatmulTuner), not commands themselves.
  void resetQueries(VkQueryPool pool, uint32_t first, uint32_t count);
  void writeTimestamp(VkQueryPool pool, uint32_t query);
  // The command buffer to record one command of kind `work` into (begun on first use), with the
  // barrier that orders it after every command before it already recorded.
  VkCommandBuffer beginCommand(Work work);
  // After each command: submits every kCommandsPerSubmit. `label` names it in the profile.
  void endCommand(std::string_view label);

  // Times every command from now on (StreamProfile); the stream finishes whenever the profile's
  // queries run out, so profiling changes how often the host waits, never the results.
  void enableProfile();
  const StreamProfile* profile() const { return profile_.get(); }

  struct Upload {
    uint8_t* host = nullptr;  // write the bytes here before the work that reads them is submitted
    uint64_t address = 0;     // where kernels read them
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0;  // in `buffer`, for copies
  };
  // Arena space (16-byte aligned), valid until the next finish(). Grows the arena when `bytes`
  // exceeds it.
  Upload upload(VkDeviceSize bytes);
  // Changes whenever earlier uploads become invalid (the arena was recycled).
  uint64_t arenaGeneration() const { return generation_; }
  VkDeviceSize arenaCapacity() const { return arena_.size; }

  void submit();  // what is recorded starts on the device; no wait
  void finish();  // everything submitted has completed; the arena is recycled
  // False once the device is lost. Reads the timeline semaphore only (no queue access), so any
  // thread may ask.
  bool deviceAnswers() const;
  bool idle() const { return !open_ && inFlight_.empty(); }

 private:
  struct InFlight {
    VkCommandBuffer commands;
    uint64_t value;
  };
  void recycle(uint64_t completed);
  VkCommandBuffer recording();

  const DeviceContext& ctx_;
  uint32_t arenaType_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  uint64_t submitted_ = 0;
  VkCommandBuffer current_ = VK_NULL_HANDLE;
  bool open_ = false;
  int commandsInCurrent_ = 0;
  // Stages and writes of the commands since the last barrier: what the next command waits for.
  VkPipelineStageFlags unorderedStages_ = 0;
  VkAccessFlags unorderedWrites_ = 0;
  Work currentWork_ = Work::kShader;
  std::vector<VkCommandBuffer> spare_;
  std::vector<InFlight> inFlight_;
  RawBuffer arena_;
  VkDeviceSize arenaUsed_ = 0;
  uint64_t generation_ = 1;
  std::unique_ptr<StreamProfile> profile_;
};

}  // namespace jitllm::vulkan
