#include "kernels/vulkan/command_stream.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::vulkan {

CommandStream::CommandStream(const DeviceContext& ctx, uint32_t arenaMemoryType, VkDeviceSize arenaBytes)
    : ctx_(ctx), arenaType_(arenaMemoryType) {
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = ctx.queueFamily;
  ctx.check(ctx.fn.vkCreateCommandPool(ctx.device, &pi, nullptr, &pool_), "vkCreateCommandPool");
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  si.pNext = &type;
  ctx.check(ctx.fn.vkCreateSemaphore(ctx.device, &si, nullptr, &timeline_), "vkCreateSemaphore");
  arena_ = createRawBuffer(ctx, arenaBytes, arenaType_, true);
}

CommandStream::~CommandStream() {
  try {
    finish();
  } catch (...) {
    // A lost device cannot finish; the resources go anyway.
    ctx_.fn.vkDeviceWaitIdle(ctx_.device);
  }
  destroyRawBuffer(ctx_, arena_);
  ctx_.fn.vkDestroySemaphore(ctx_.device, timeline_, nullptr);
  ctx_.fn.vkDestroyCommandPool(ctx_.device, pool_, nullptr);  // frees its command buffers
}

VkCommandBuffer CommandStream::recording() {
  if (open_) return current_;
  if (spare_.empty()) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb;
    ctx_.check(ctx_.fn.vkAllocateCommandBuffers(ctx_.device, &ai, &cb), "vkAllocateCommandBuffers");
    spare_.push_back(cb);
  }
  current_ = spare_.back();
  spare_.pop_back();
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  ctx_.check(ctx_.fn.vkBeginCommandBuffer(current_, &bi), "vkBeginCommandBuffer");
  open_ = true;
  commandsInCurrent_ = 0;
  if (profile_) profile_->begin(current_);
  return current_;
}

void CommandStream::enableProfile() {
  if (profile_) return;
  finish();  // command buffers already begun have no start timestamp
  profile_ = std::make_unique<StreamProfile>(ctx_);
}

namespace {

VkPipelineStageFlags stageOf(CommandStream::Work work) {
  return work == CommandStream::Work::kShader ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : VK_PIPELINE_STAGE_TRANSFER_BIT;
}

}  // namespace

VkCommandBuffer CommandStream::beginCommand(Work work) {
  VkCommandBuffer cb = recording();
  if (unorderedStages_) {
    VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = unorderedWrites_;
    barrier.dstAccessMask = work == Work::kShader ? VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT
                                                  : VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    ctx_.fn.vkCmdPipelineBarrier(cb, unorderedStages_, stageOf(work), 0, 1, &barrier, 0, nullptr, 0, nullptr);
    unorderedStages_ = 0;
    unorderedWrites_ = 0;
  }
  currentWork_ = work;
  return cb;
}

void CommandStream::resetQueries(VkQueryPool pool, uint32_t first, uint32_t count) {
  ctx_.fn.vkCmdResetQueryPool(recording(), pool, first, count);
}

void CommandStream::writeTimestamp(VkQueryPool pool, uint32_t query) {
  ctx_.fn.vkCmdWriteTimestamp(recording(), VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, query);
}

void CommandStream::endCommand(std::string_view label) {
  JITLLM_ASSERT(open_);
  unorderedStages_ |= stageOf(currentWork_);
  unorderedWrites_ |= currentWork_ == Work::kShader ? VK_ACCESS_SHADER_WRITE_BIT : VK_ACCESS_TRANSFER_WRITE_BIT;
  if (profile_) {
    profile_->mark(current_, label);
    if (!profile_->hasRoom()) {
      finish();
      return;
    }
  }
  if (++commandsInCurrent_ >= kCommandsPerSubmit) submit();
}

void CommandStream::submit() {
  if (!open_) return;
  if (unorderedStages_) {
    // The host may read what this submission wrote once its semaphore value is reached. The
    // device-side order of the next command after these is still owed (unordered* stay set).
    VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = unorderedWrites_;
    barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    ctx_.fn.vkCmdPipelineBarrier(current_, unorderedStages_, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0,
                                 nullptr);
  }
  ctx_.check(ctx_.fn.vkEndCommandBuffer(current_), "vkEndCommandBuffer");
  open_ = false;
  const uint64_t value = submitted_ + 1;
  VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  ts.signalSemaphoreValueCount = 1;
  ts.pSignalSemaphoreValues = &value;
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.pNext = &ts;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &current_;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline_;
  ctx_.check(ctx_.fn.vkQueueSubmit(ctx_.queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
  submitted_ = value;
  inFlight_.push_back({current_, value});
  current_ = VK_NULL_HANDLE;
}

void CommandStream::recycle(uint64_t completed) {
  auto done =
      std::stable_partition(inFlight_.begin(), inFlight_.end(), [&](const InFlight& f) { return f.value > completed; });
  for (auto it = done; it != inFlight_.end(); ++it) {
    ctx_.fn.vkResetCommandBuffer(it->commands, 0);
    spare_.push_back(it->commands);
  }
  inFlight_.erase(done, inFlight_.end());
}

void CommandStream::finish() {
  submit();
  if (!inFlight_.empty()) {
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline_;
    wi.pValues = &submitted_;
    ctx_.check(ctx_.fn.vkWaitSemaphores(ctx_.device, &wi, UINT64_MAX), "vkWaitSemaphores");
    recycle(submitted_);
  }
  if (profile_) profile_->collect();
  if (arenaUsed_) {
    arenaUsed_ = 0;
    generation_++;
  }
}

CommandStream::Upload CommandStream::upload(VkDeviceSize bytes) {
  const VkDeviceSize size = (std::max<VkDeviceSize>(bytes, 1) + 15) / 16 * 16;
  if (arenaUsed_ + size > arena_.size) {
    finish();
    if (size > arena_.size) {
      RawBuffer bigger = createRawBuffer(ctx_, std::max(size, arena_.size * 2), arenaType_, true);
      destroyRawBuffer(ctx_, arena_);
      arena_ = bigger;
      generation_++;
    }
  }
  Upload u{arena_.host + arenaUsed_, arena_.address + arenaUsed_, arena_.buffer, arenaUsed_};
  arenaUsed_ += size;
  return u;
}

bool CommandStream::deviceAnswers() const {
  uint64_t value = 0;
  return ctx_.fn.vkGetSemaphoreCounterValue(ctx_.device, timeline_, &value) != VK_ERROR_DEVICE_LOST;
}

}  // namespace jitllm::vulkan
