// The on-disk cache of one Vulkan device's compiled kernels: SPIR-V from shaderc (our own
// files) and the driver's VkPipelineCache blob.
//
// Location: $JITLLM_CACHE_DIR if set (set but empty: no disk cache), else $XDG_CACHE_HOME/jitllm,
// else ~/.cache/jitllm; under it vulkan/<device UUID>-<driver version>/ holds
//   spirv/<key>.spv       one kernel variant; key = hash of its full source (defines included),
//                         the compile options and the shaderc/SPIR-V versions
//   pipeline-cache.bin    vkGetPipelineCacheData, given back to vkCreatePipelineCache
//   matmul-tuning.txt     the dispatch shapes MatmulTuner timed (matmul_tuner.h)
// The UUID and driver version in the path keep drivers and devices apart (a driver update starts
// a fresh cache); each .spv also records a second, independent hash of its source and a checksum
// of its words, so a collision or a torn file is recompiled, never used. Writes go to a temporary
// file renamed into place, so concurrent processes never see half a file. A cache that cannot be
// written is skipped silently: it only saves time.
//
// Ownership: a value (paths only). Thread-safety: const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/vulkan/physical_devices.h"

namespace jitllm::vulkan {

uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull);

class KernelCache final {
 public:
  // The root named by the environment (see above); empty when caching is off or no home exists.
  static std::string defaultRoot();

  // root empty: a cache that stores nothing.
  KernelCache(const std::string& root, const PhysicalDeviceDescription& device);

  bool enabled() const { return !directory_.empty(); }
  const std::string& directory() const { return directory_; }

  std::optional<std::vector<uint32_t>> loadSpirv(uint64_t key, uint64_t check) const;
  void storeSpirv(uint64_t key, uint64_t check, const std::vector<uint32_t>& spirv) const;
  std::vector<uint8_t> loadPipelineCache() const;
  void storePipelineCache(const std::vector<uint8_t>& data) const;
  // A small file of the cache directory by name ("" when absent or caching is off).
  std::string loadText(const std::string& name) const;
  void storeText(const std::string& name, const std::string& text) const;

 private:
  std::string spirvPath(uint64_t key) const;
  void writeAtomically(const std::string& path, const void* data, size_t size) const;

  std::string directory_;
};

}  // namespace jitllm::vulkan
