#include "kernels/vulkan/pipeline_library.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <set>
#include <shaderc/shaderc.hpp>
#include <sstream>
#include <thread>

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

std::vector<uint32_t> PipelineLibrary::compile(const std::string& source, const std::string& name) const {
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

PipelineLibrary::Spirv PipelineLibrary::spirv(const KernelSpec& spec) const {
  using Clock = std::chrono::steady_clock;
  const std::string key = spec.key();
  const std::string text = source(spec);
  const std::string hashed = text + "\n// " + kCompileTag;
  const uint64_t cacheKey = fnv1a64(hashed);
  const uint64_t check = fnv1a64(hashed, 0x84222325cbf29ce4ull);
  Spirv out;
  if (auto cached = cache_.loadSpirv(cacheKey, check)) {
    out.words = std::move(*cached);
    return out;
  }
  const auto t0 = Clock::now();
  out.words = compile(text, key);
  out.compileSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.compiled = true;
  cache_.storeSpirv(cacheKey, check, out.words);
  return out;
}

VkPipeline PipelineLibrary::create(const std::string& key, const Spirv& code) {
  using Clock = std::chrono::steady_clock;
  if (code.compiled) {
    stats_.compileSeconds += code.compileSeconds;
    stats_.compiled++;
  } else {
    stats_.loadedFromDisk++;
  }
  const auto t0 = Clock::now();
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = code.words.size() * sizeof(uint32_t);
  mi.pCode = code.words.data();
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
  if (prepared_) stats_.madeOnUse++;
  pipelines_.emplace(key, pipeline);
  names_.emplace(pipeline, key);
  return pipeline;
}

VkPipeline PipelineLibrary::get(const KernelSpec& spec) {
  const std::string key = spec.key();
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  return create(key, spirv(spec));
}

size_t PipelineLibrary::prepare(const std::vector<KernelSpec>& specs) {
  std::vector<const KernelSpec*> missing;
  std::set<std::string> keys;
  for (const KernelSpec& s : specs) {
    std::string key = s.key();
    if (!pipelines_.count(key) && keys.insert(std::move(key)).second) missing.push_back(&s);
  }
  // SPIR-V from the disk cache or shaderc (a compiler per call) on a thread per core; the driver's
  // pipelines after, on this thread (the library is one thread's).
  std::vector<std::optional<Spirv>> made(missing.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < missing.size();) {
      try {
        made[i] = spirv(*missing[i]);
      } catch (const Error&) {
        // Left out: the op that needs it compiles it again and reports the error then.
      }
    }
  };
  const size_t threads = std::min<size_t>(missing.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; t++) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  size_t created = 0;
  for (size_t i = 0; i < missing.size(); i++) {
    if (!made[i]) continue;
    try {
      create(missing[i]->key(), *made[i]);
      created++;
    } catch (const Error&) {
      // The driver refused it: likewise left to the op that needs it, which reports the error.
    }
  }
  return created;
}

}  // namespace jitllm::vulkan
