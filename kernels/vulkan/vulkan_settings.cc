#include "kernels/vulkan/vulkan_settings.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace jitllm::vulkan {
namespace {

bool onUnlessZero(std::optional<bool> option, const char* envName) {
  if (option) return *option;
  const char* env = std::getenv(envName);
  return !(env && std::strcmp(env, "0") == 0);
}

}  // namespace

VulkanSettings resolveSettings(const VulkanSettings& s) {
  VulkanSettings r = s;
  r.integerMatmul = onUnlessZero(s.integerMatmul, "JITLLM_VULKAN_INTDOT");
  r.subgroupShuffle = onUnlessZero(s.subgroupShuffle, "JITLLM_VULKAN_SUBGROUP");
  r.splitAttention = onUnlessZero(s.splitAttention, "JITLLM_VULKAN_ATTENTION_SPLIT");
  if (!s.tune) {
    if (const char* tune = std::getenv("JITLLM_VULKAN_TUNE"); tune && *tune) r.tune = std::strcmp(tune, "0") != 0;
  }
  if (!s.decodeRowGroups && !s.decodeRowsPerGroup) {
    if (const char* rows = std::getenv("JITLLM_VULKAN_DECODE_ROWS")) {
      int wr = 0, nr = 0;
      if (std::sscanf(rows, "%d,%d", &wr, &nr) == 2) {
        r.decodeRowGroups = wr;
        r.decodeRowsPerGroup = nr;
      }
    }
  }
  if (!s.profile) {
    const char* profile = std::getenv("JITLLM_VULKAN_PROFILE");
    r.profile = profile && *profile && std::strcmp(profile, "0") != 0;
  }
  return r;
}

}  // namespace jitllm::vulkan
