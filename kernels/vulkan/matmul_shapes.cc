#include "kernels/vulkan/matmul_shapes.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "base/error.h"
#include "kernels/vulkan/kernel_variants.h"
#include "kernels/vulkan/stream_profile.h"

namespace jitllm::vulkan {

MatmulShapes::MatmulShapes(const DeviceContext& ctx, CommandStream& stream, PipelineLibrary& pipelines,
                           const KernelCache& cache, const VulkanSettings& settings)
    : ctx_(ctx), stream_(stream), pipelines_(pipelines), tuner_(cache) {
  const PhysicalDeviceDescription& phys = *ctx.physical;
  if (settings.decodeRowGroups && settings.decodeRowsPerGroup) {
    const int wr = *settings.decodeRowGroups, nr = *settings.decodeRowsPerGroup;
    if (wr >= 1 && nr >= 1 && wr * nr <= 16 && wr * kMatmulLanes <= int(phys.maxWorkgroupInvocations)) {
      decodeRowGroups_ = wr;
      decodeRowsPerGroup_ = nr;
    }
  }
  tune_ = settings.tune.value_or(!phys.software) && phys.timestampPeriodNs > 0;
}

MatmulShapes::~MatmulShapes() {
  if (queries_) ctx_.fn.vkDestroyQueryPool(ctx_.device, queries_, nullptr);
}

std::string MatmulShapes::processKey(const KernelSpec& variant, const WeightRef& w) {
  return variant.key() + "|rows=" + std::to_string(w.rows);
}

bool MatmulShapes::known(const KernelSpec& variant, const WeightRef& w, int64_t tokens, Shape& shape,
                         std::string& tuningKey) {
  if (tokens == 1 && decodeRowGroups_ > 0) {
    shape = {decodeRowGroups_, decodeRowsPerGroup_};
    return true;
  }
  const std::string local = processKey(variant, w);
  if (auto it = chosen_.find(local); it != chosen_.end()) {
    shape = it->second;
    return true;
  }
  // The file's key also carries the kernel's source hash: a changed kernel is timed afresh.
  KernelSpec defaults = variant;
  defaults.define("WR", int64_t(MatmulTuner::kDefault.wr)).define("NR", int64_t(MatmulTuner::kDefault.nr));
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(pipelines_.source(defaults))));
  tuningKey = local + "|src=" + hash;
  if (auto found = tuner_.find(tuningKey)) {
    shape = *found;
    chosen_.emplace(local, shape);
    return true;
  }
  shape = MatmulTuner::kDefault;
  return false;
}

std::vector<MatmulShapes::Shape> MatmulShapes::candidates(int tt) const {
  return MatmulTuner::candidates(tt, kMatmulLanes, *ctx_.physical);
}

MatmulShapes::Shape MatmulShapes::time(const KernelSpec& variant, int tt, const WeightRef& w, int64_t tokens,
                                       const std::string& tuningKey, const Dispatch& dispatch) {
  const std::vector<Shape> shapes = candidates(tt);
  // Pipelines first, so no compile lands inside a timed span; then rounds of (a warm-up dispatch,
  // a timestamp, kRepeats dispatches, a timestamp) per candidate, well under one submission.
  std::vector<VkPipeline> pipelines;
  for (const Shape& c : shapes) {
    KernelSpec spec = variant;
    spec.define("WR", int64_t(c.wr)).define("NR", int64_t(c.nr));
    pipelines.push_back(pipelines_.get(spec));
  }
  constexpr int kRounds = 2, kRepeats = 5;
  static_assert(8 * (1 + kRepeats) < CommandStream::kCommandsPerSubmit);
  const uint32_t queries = uint32_t(2 * shapes.size());
  constexpr uint32_t kQueries = 16;
  if (!queries_) queries_ = createTimestampQueries(ctx_, kQueries);
  JITLLM_ASSERT(queries <= kQueries);
  std::vector<double> best(shapes.size(), 1e300);
  stream_.finish();
  for (int round = 0; round < kRounds; round++) {
    stream_.resetQueries(queries_, 0, queries);
    for (size_t i = 0; i < shapes.size(); i++) {
      const uint32_t groups = groupsFor(uint64_t(w.rows), uint64_t(shapes[i].wr * shapes[i].nr));
      const uint32_t tokenGroups = groupsFor(uint64_t(tokens), uint64_t(tt));
      dispatch(pipelines[i], groups, tokenGroups);
      stream_.writeTimestamp(queries_, uint32_t(2 * i));
      for (int r = 0; r < kRepeats; r++) dispatch(pipelines[i], groups, tokenGroups);
      stream_.writeTimestamp(queries_, uint32_t(2 * i + 1));
    }
    stream_.finish();
    const std::vector<uint64_t> ticks = readTimestamps(ctx_, queries_, queries);
    for (size_t i = 0; i < shapes.size(); i++) best[i] = std::min(best[i], double(ticks[2 * i + 1] - ticks[2 * i]));
  }
  tunings_++;
  const Shape fastest = shapes[size_t(std::min_element(best.begin(), best.end()) - best.begin())];
  tuner_.remember(tuningKey, fastest);
  chosen_.emplace(processKey(variant, w), fastest);
  return fastest;
}

}  // namespace jitllm::vulkan
