// The GLSL sources of the Vulkan kernels (kernels/vulkan/shaders/), compiled into the binary by
// embed_shaders.cmake so that a binary always carries the exact text its cache keys hash.
//
// Thread-safety: immutable after first use.
#pragma once

#include <string_view>
#include <vector>

namespace jitllm::vulkan {

struct ShaderSource {
  std::string_view name;  // file name: "matmul.comp", "common.glsl"
  std::string_view text;
};

const std::vector<ShaderSource>& shaderSources();

}  // namespace jitllm::vulkan
