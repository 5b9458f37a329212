// The dispatch shape each matrix product takes on one Vulkan device (MatmulTuner::Shape: WR row
// groups of NR rows a workgroup): JITLLM_VULKAN_DECODE_ROWS for decode where it is set; else the
// shape chosen earlier in this process; else the tuning file's (matmul_tuner.h); else, where
// tuning is on and the product may be dispatched again, the fastest of the candidates timed on
// the product's own operands (time()); else MatmulTuner::kDefault. No shape changes a bit of the
// result (the shaders' headers), which is what makes timing them safe.
//
// Ownership: owns the tuner and its timestamp queries; borrows the context, the command stream
// and the pipeline library. Thread-safety: the executor thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/device.h"
#include "kernels/vulkan/command_stream.h"
#include "kernels/vulkan/device_context.h"
#include "kernels/vulkan/matmul_tuner.h"
#include "kernels/vulkan/pipeline_library.h"
#include "kernels/vulkan/vulkan_settings.h"

namespace jitllm::vulkan {

class MatmulShapes final {
 public:
  using Shape = MatmulTuner::Shape;
  // Records one candidate's dispatch: its pipeline over `groups` x `tokenGroups` workgroups.
  using Dispatch = std::function<void(VkPipeline pipeline, uint32_t groups, uint32_t tokenGroups)>;

  // settings: resolved (vulkan_settings.h); tuning on where it says, else on devices that are not
  // software ones, and only where the compute queue has timestamps.
  MatmulShapes(const DeviceContext& ctx, CommandStream& stream, PipelineLibrary& pipelines, const KernelCache& cache,
               const VulkanSettings& settings);
  ~MatmulShapes();
  MatmulShapes(const MatmulShapes&) = delete;
  MatmulShapes& operator=(const MatmulShapes&) = delete;

  bool tunes() const { return tune_; }
  // The shape of `variant` (without WR and NR) for w over `tokens` when one is chosen; otherwise
  // false, the default in `shape`, and in `tuningKey` the key to remember a timed one under.
  bool known(const KernelSpec& variant, const WeightRef& w, int64_t tokens, Shape& shape, std::string& tuningKey);
  // Times the candidates of one product (`variant` at tt tokens per workgroup), each recorded by
  // `dispatch` on the product's real operands, and remembers the fastest under tuningKey (the
  // file) and the variant (this process).
  Shape time(const KernelSpec& variant, int tt, const WeightRef& w, int64_t tokens, const std::string& tuningKey,
             const Dispatch& dispatch);
  // The shapes worth timing at tt tokens per workgroup on this device.
  std::vector<Shape> candidates(int tt) const;
  uint64_t tunings() const { return tunings_; }  // product shapes timed (not found in the file)

 private:
  static std::string processKey(const KernelSpec& variant, const WeightRef& w);

  const DeviceContext& ctx_;
  CommandStream& stream_;
  PipelineLibrary& pipelines_;
  MatmulTuner tuner_;
  bool tune_ = false;
  int decodeRowGroups_ = 0, decodeRowsPerGroup_ = 0;  // JITLLM_VULKAN_DECODE_ROWS (0: the tuner's)
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint64_t tunings_ = 0;
  // (variant key, rows) -> shape, for this process: the tuner's key hashes the kernel's source.
  std::unordered_map<std::string, Shape> chosen_;
};

}  // namespace jitllm::vulkan
