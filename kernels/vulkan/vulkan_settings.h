// Every knob of the Vulkan backend in one place. A field left unset takes the environment variable
// named beside it where that is set, else the default; resolveSettings() is the only code that
// reads JITLLM_VULKAN_* (the loader's path, JITLLM_VULKAN_LOADER, is the loader's own: loader.h).
// docs/vulkan.md lists them.
//
// Thread-safety: values and a pure function (of the environment).
#pragma once

#include <optional>

namespace jitllm::vulkan {

struct VulkanSettings {
  // q4_K / q6_K products on integer dot products (shaders/matmul_int.comp) rather than float
  // decoding. JITLLM_VULKAN_INTDOT=0 turns them off.
  std::optional<bool> integerMatmul;
  // Use VK_KHR_shader_integer_dot_product where the device has it (default); false spells the
  // dot products out in integer arithmetic (the same integers, so the same bits: tests).
  bool integerDotProduct = true;
  // Reductions' narrower levels as subgroup shuffles where the device has them (shaders/
  // lane_sums.glsl: the same bits either way). JITLLM_VULKAN_SUBGROUP=0 turns them off.
  std::optional<bool> subgroupShuffle;
  // Time each matrix product shape's dispatch candidates once and remember the fastest
  // (matmul_tuner.h). Default: on for devices that are not software ones and have timestamps;
  // JITLLM_VULKAN_TUNE=0 turns it off, =1 on for software devices too.
  std::optional<bool> tune;
  // Decode attention spread over workgroups for long contexts (attention.comp MODE 1 + 2);
  // JITLLM_VULKAN_ATTENTION_SPLIT=0 keeps MODE 0 always (A/B runs).
  std::optional<bool> splitAttention;
  // Decode products' row groups per workgroup and rows per group ("W,N", JITLLM_VULKAN_DECODE_ROWS,
  // tuning experiments); unset: the tuner's choice.
  std::optional<int> decodeRowGroups;
  std::optional<int> decodeRowsPerGroup;
  // GPU time per dispatch, printed at the end (JITLLM_VULKAN_PROFILE=1).
  std::optional<bool> profile;
};

// `settings` with its unset fields from the environment. tune stays unset when neither the field
// nor JITLLM_VULKAN_TUNE says (the device then decides); a malformed JITLLM_VULKAN_DECODE_ROWS is
// ignored, as a tuning experiment's typo should not stop a device.
VulkanSettings resolveSettings(const VulkanSettings& settings);

}  // namespace jitllm::vulkan
