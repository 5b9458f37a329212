#include "kernels/vulkan/matmul_tuner.h"

#include <sstream>

namespace jitllm::vulkan {

MatmulTuner::MatmulTuner(KernelCache cache) : cache_(std::move(cache)) {
  std::istringstream in(cache_.loadText(kFile));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    Shape s;
    if (fields >> key >> s.wr >> s.nr && s.wr >= 1 && s.wr <= 16 && s.nr >= 1 && s.nr <= 16) choices_[key] = s;
  }
}

std::optional<MatmulTuner::Shape> MatmulTuner::find(const std::string& key) const {
  const auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void MatmulTuner::remember(const std::string& key, Shape shape) {
  choices_[key] = shape;
  // Another process may have tuned other shapes meanwhile: keep its lines, ours win.
  MatmulTuner onDisk(cache_);
  for (const auto& [k, s] : onDisk.choices_) choices_.try_emplace(k, s);
  std::ostringstream out;
  for (const auto& [k, s] : choices_) out << k << ' ' << s.wr << ' ' << s.nr << '\n';
  cache_.storeText(kFile, out.str());
}

std::vector<MatmulTuner::Shape> MatmulTuner::candidates(int tokensPerGroup, int lanes,
                                                        const PhysicalDeviceDescription& device) {
  std::vector<Shape> out;
  for (Shape s : {kDefault, Shape{1, 2}, Shape{4, 2}, Shape{1, 4}, Shape{2, 4}, Shape{2, 1}, Shape{4, 1}}) {
    const uint64_t invocations = uint64_t(s.wr) * uint64_t(lanes);
    const uint64_t shared = uint64_t(s.wr) * uint64_t(s.nr) * uint64_t(tokensPerGroup) * uint64_t(lanes) * 4;
    if (invocations <= 256 && invocations <= device.maxWorkgroupInvocations && shared <= device.maxSharedMemoryBytes) {
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace jitllm::vulkan
