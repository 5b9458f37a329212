#include "kernels/vulkan/pipeline_library.h"

#include <chrono>
#include <set>
#include <shaderc/shaderc.hpp>
#include <sstream>

#include "base/error.h"
#include "kernels/vulkan/shader_sources.h"

namespace jitllm::vulkan {
namespace {

// Part of every cache key: bump when the way sources are composed or compiled changes.
constexpr const char* kCompileTag = "jitllm-vk-1 glsl460 vulkan1.2 spv1.5 O";

std::string_view findSource(std::string_view name) {
  for (const auto& s : shaderSources()) {
    if (s.name == name) return s.text;
  }
  JITLLM_FAIL(kFailed, "internal error: no embedded shader named '", name, "'");
}

// Replaces each `#include "name"` line with that embedded file, once per file.
void expand(std::string_view name, std::set<std::string>& seen, std::string& out) {
  if (!seen.insert(std::string(name)).second) return;
  std::string_view text = findSource(name);
  out += "#line 1 \"" + std::string(name) + "\"\n";
  size_t lineNo = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    lineNo++;
    if (line.rfind("#include \"", 0) == 0) {
      const size_t end = line.find('"', 10);
      expand(line.substr(10, end - 10), seen, out);
      out += "#line " + std::to_string(lineNo + 1) + " \"" + std::string(name) + "\"\n";
      continue;
    }
    out.append(line);
    out += '\n';
  }
}

}  // namespace

std::string KernelSpec::key() const {
  std::string k = shader;
  for (const auto& [n, v] : defines) {
    k += '|';
    k += n;
    k += '=';
    k += v;
  }
  return k;
}

PipelineLibrary::PipelineLibrary(const DeviceContext& ctx, KernelCache cache,
                                 std::vector<std::pair<std::string, std::string>> deviceDefines)
    : ctx_(ctx), cache_(std::move(cache)), deviceDefines_(std::move(deviceDefines)) {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo li{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  li.pushConstantRangeCount = 1;
  li.pPushConstantRanges = &range;
  ctx.check(ctx.fn.vkCreatePipelineLayout(ctx.device, &li, nullptr, &layout_), "vkCreatePipelineLayout");
  const std::vector<uint8_t> blob = cache_.loadPipelineCache();
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = blob.size();
  ci.pInitialData = blob.empty() ? nullptr : blob.data();
  if (ctx.fn.vkCreatePipelineCache(ctx.device, &ci, nullptr, &pipelineCache_) != VK_SUCCESS) {
    // A blob the driver rejects outright (drivers should ignore stale ones; some fail instead).
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    ctx.check(ctx.fn.vkCreatePipelineCache(ctx.device, &ci, nullptr, &pipelineCache_), "vkCreatePipelineCache");
  }
}

PipelineLibrary::~PipelineLibrary() {
  try {
    savePipelineCache();
  } catch (...) {
    // Only a cache: never fail a shutdown over it.
  }
  for (auto& [k, p] : pipelines_) ctx_.fn.vkDestroyPipeline(ctx_.device, p, nullptr);
  ctx_.fn.vkDestroyPipelineCache(ctx_.device, pipelineCache_, nullptr);
  ctx_.fn.vkDestroyPipelineLayout(ctx_.device, layout_, nullptr);
}

void PipelineLibrary::savePipelineCache() const {
  if (!cache_.enabled() || stats_.pipelines == 0) return;
  size_t size = 0;
  if (ctx_.fn.vkGetPipelineCacheData(ctx_.device, pipelineCache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
  std::vector<uint8_t> data(size);
  if (ctx_.fn.vkGetPipelineCacheData(ctx_.device, pipelineCache_, &size, data.data()) != VK_SUCCESS) return;
  data.resize(size);
  cache_.storePipelineCache(data);
}

std::string PipelineLibrary::source(const KernelSpec& spec) const {
  std::string out = "#version 460\n#extension GL_GOOGLE_cpp_style_line_directive : require\n";
  for (const auto& [n, v] : deviceDefines_) out += "#define " + n + " " + v + "\n";
  for (const auto& [n, v] : spec.defines) out += "#define " + n + " " + v + "\n";
  std::set<std::string> seen;
  expand(spec.shader, seen, out);
  return out;
}

std::vector<uint32_t> PipelineLibrary::compile(const std::string& source, const std::string& name) {
  shaderc::Compiler compiler;
  shaderc::CompileOptions options;
  options.SetTargetEnvironment(shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_2);
  options.SetTargetSpirv(shaderc_spirv_version_1_5);
  options.SetOptimizationLevel(shaderc_optimization_level_performance);
  const auto result = compiler.CompileGlslToSpv(source, shaderc_compute_shader, name.c_str(), options);
  if (result.GetCompilationStatus() != shaderc_compilation_status_success) {
    JITLLM_FAIL(kFailed, ctx_.id, ": shaderc could not compile ", name, ": ", result.GetErrorMessage());
  }
  return std::vector<uint32_t>(result.cbegin(), result.cend());
}

const std::string& PipelineLibrary::name(VkPipeline pipeline) const {
  static const std::string unknown = "?";
  const auto it = names_.find(pipeline);
  return it == names_.end() ? unknown : it->second;
}

VkPipeline PipelineLibrary::get(const KernelSpec& spec) {
  const std::string key = spec.key();
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;

  using Clock = std::chrono::steady_clock;
  const std::string text = source(spec);
  const std::string hashed = text + "\n// " + kCompileTag;
  const uint64_t cacheKey = fnv1a64(hashed);
  const uint64_t check = fnv1a64(hashed, 0x84222325cbf29ce4ull);
  std::vector<uint32_t> spirv;
  if (auto cached = cache_.loadSpirv(cacheKey, check)) {
    spirv = std::move(*cached);
    stats_.loadedFromDisk++;
  } else {
    const auto t0 = Clock::now();
    spirv = compile(text, key);
    stats_.compileSeconds += std::chrono::duration<double>(Clock::now() - t0).count();
    stats_.compiled++;
    cache_.storeSpirv(cacheKey, check, spirv);
  }

  const auto t0 = Clock::now();
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = spirv.size() * sizeof(uint32_t);
  mi.pCode = spirv.data();
  VkShaderModule module;
  ctx_.check(ctx_.fn.vkCreateShaderModule(ctx_.device, &mi, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo pi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pi.stage = VkPipelineShaderStageCreateInfo{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  pi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pi.stage.module = module;
  pi.stage.pName = "main";
  pi.layout = layout_;
  VkPipeline pipeline;
  const VkResult r = ctx_.fn.vkCreateComputePipelines(ctx_.device, pipelineCache_, 1, &pi, nullptr, &pipeline);
  ctx_.fn.vkDestroyShaderModule(ctx_.device, module, nullptr);
  ctx_.check(r, "vkCreateComputePipelines");
  stats_.pipelineSeconds += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.pipelines++;
  pipelines_.emplace(key, pipeline);
  names_.emplace(pipeline, key);
  return pipeline;
}

}  // namespace jitllm::vulkan
