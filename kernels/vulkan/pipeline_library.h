// The JIT: GLSL kernels from shaders/, specialised with #defines for a model's shapes and quant
// types and for the device, compiled to SPIR-V by shaderc at run time and made into compute
// pipelines - each variant once per process, and once per machine thanks to the disk cache
// (kernel_cache.h: our SPIR-V files plus the driver's VkPipelineCache).
//
// Every pipeline shares one layout: no descriptor sets (kernels reach memory by device address)
// and kPushConstantBytes of push constants.
//
// Ownership: owns the pipelines, the layout and the VkPipelineCache; saves the latter to disk
// when destroyed. Thread-safety: one thread at a time (the device's executor); prepare() runs
// shaderc on threads of its own inside the call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/vulkan/device_context.h"
#include "kernels/vulkan/kernel_cache.h"

namespace jitllm::vulkan {

// One kernel variant: a shader file and the defines that specialise it.
struct KernelSpec {
  std::string shader;  // "matmul.comp"
  std::vector<std::pair<std::string, std::string>> defines;

  KernelSpec& define(std::string name, std::string value = "1") {
    defines.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  KernelSpec& define(std::string name, int64_t value) { return define(std::move(name), std::to_string(value)); }
  std::string key() const;
};

struct KernelStats {
  int pipelines = 0;           // variants made in this process
  int compiled = 0;            // of which shaderc compiled
  int loadedFromDisk = 0;      // of which came from the SPIR-V cache
  double compileSeconds = 0;   // shaderc
  double pipelineSeconds = 0;  // vkCreateComputePipelines (the driver's own compile)
  int madeOnUse = 0;           // made by an op after markPrepared(): a shape prepare did not foresee
};

class PipelineLibrary final {
 public:
  static constexpr uint32_t kPushConstantBytes = 128;  // the minimum every device guarantees

  // deviceDefines are added to every kernel (SUBGROUP_SIZE, HAVE_FP64, ...).
  PipelineLibrary(const DeviceContext& ctx, KernelCache cache,
                  std::vector<std::pair<std::string, std::string>> deviceDefines);
  ~PipelineLibrary();
  PipelineLibrary(const PipelineLibrary&) = delete;
  PipelineLibrary& operator=(const PipelineLibrary&) = delete;

  VkPipeline get(const KernelSpec& spec);
  // Makes the pipelines of `specs` that do not exist yet, their SPIR-V compiled (or read from the
  // disk cache) on a thread per core. A spec that does not compile, or whose pipeline the driver
  // refuses, is left out: the op that needs it tries again and reports the error then. Returns
  // how many pipelines it made.
  size_t prepare(const std::vector<KernelSpec>& specs);
  // From now on a pipeline an op makes counts as KernelStats::madeOnUse.
  void markPrepared() { prepared_ = true; }
  // The key of the spec a pipeline of this library was made from ("matmul.comp|K=2048|...").
  const std::string& name(VkPipeline pipeline) const;
  VkPipelineLayout layout() const { return layout_; }
  const KernelStats& stats() const { return stats_; }
  const KernelCache& cache() const { return cache_; }
  void savePipelineCache() const;

  // The full GLSL text a spec compiles (version line, defines, included files): what the cache
  // key hashes. Public for tests and for debugging a kernel by hand (glslangValidator).
  std::string source(const KernelSpec& spec) const;

 private:
  struct Spirv {
    std::vector<uint32_t> words;
    bool compiled = false;  // by shaderc, not from the disk cache
    double compileSeconds = 0;
  };
  // A spec's SPIR-V: from the disk cache, else compiled (and stored). Any thread.
  Spirv spirv(const KernelSpec& spec) const;
  std::vector<uint32_t> compile(const std::string& source, const std::string& name) const;
  // The pipeline of `code`, counted in stats_ and kept under `key`.
  VkPipeline create(const std::string& key, const Spirv& code);

  const DeviceContext& ctx_;
  KernelCache cache_;
  std::vector<std::pair<std::string, std::string>> deviceDefines_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache pipelineCache_ = VK_NULL_HANDLE;
  std::unordered_map<std::string, VkPipeline> pipelines_;
  std::unordered_map<VkPipeline, std::string> names_;
  KernelStats stats_;
  bool prepared_ = false;
};

}  // namespace jitllm::vulkan
