#include "kernels/vulkan/stream_profile.h"

#include <algorithm>

namespace jitllm::vulkan {

VkQueryPool createTimestampQueries(const DeviceContext& ctx, uint32_t count) {
  VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qi.queryCount = count;
  VkQueryPool pool;
  ctx.check(ctx.fn.vkCreateQueryPool(ctx.device, &qi, nullptr, &pool), "vkCreateQueryPool");
  return pool;
}

std::vector<uint64_t> readTimestamps(const DeviceContext& ctx, VkQueryPool pool, uint32_t count) {
  std::vector<uint64_t> ticks(count);
  ctx.check(ctx.fn.vkGetQueryPoolResults(ctx.device, pool, 0, count, ticks.size() * sizeof(uint64_t), ticks.data(),
                                         sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
            "vkGetQueryPoolResults");
  return ticks;
}

StreamProfile::StreamProfile(const DeviceContext& ctx) : ctx_(ctx), pool_(createTimestampQueries(ctx, kQueries)) {
  labels_.reserve(kQueries);
}

StreamProfile::~StreamProfile() { ctx_.fn.vkDestroyQueryPool(ctx_.device, pool_, nullptr); }

void StreamProfile::begin(VkCommandBuffer cb) {
  if (needsReset_) {
    ctx_.fn.vkCmdResetQueryPool(cb, pool_, 0, kQueries);
    needsReset_ = false;
  }
  ctx_.fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, pool_, used_++);
  labels_.emplace_back();
}

void StreamProfile::mark(VkCommandBuffer cb, std::string_view label) {
  ctx_.fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, used_++);
  labels_.emplace_back(label.empty() ? "copy" : label);
}

void StreamProfile::collect() {
  if (used_ == 0) return;
  const std::vector<uint64_t> ticks = readTimestamps(ctx_, pool_, used_);
  const double period = ctx_.physical->timestampPeriodNs;
  for (uint32_t i = 1; i < used_; i++) {
    if (labels_[i].empty()) continue;  // a command buffer's start: the time before it is the host's
    Total& t = totals_[labels_[i]];
    t.calls++;
    t.ns += double(ticks[i] - ticks[i - 1]) * period;
  }
  used_ = 0;
  labels_.clear();
  needsReset_ = true;
}

void StreamProfile::report(std::FILE* out) const {
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  double total = 0;
  for (const auto& [label, t] : rows) total += t.ns;
  std::fprintf(out, "%s GPU time by command (timestamps between commands, barriers included): %.3f ms\n",
               ctx_.id.c_str(), total * 1e-6);
  for (const auto& [label, t] : rows) {
    std::fprintf(out, "  %8lld calls %10.3f ms %8.2f us/call %5.1f%%  %s\n", static_cast<long long>(t.calls),
                 t.ns * 1e-6, t.ns * 1e-3 / double(t.calls), 100.0 * t.ns / total, label.c_str());
  }
}

}  // namespace jitllm::vulkan
