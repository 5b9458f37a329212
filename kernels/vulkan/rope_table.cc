#include "kernels/vulkan/rope_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace jitllm::vulkan {

bool RopeTable::holds(const int32_t* positions, int64_t tokens, const RopeParams& params) const {
  const int half = params.rotaryDims / 2;
  return rotaryDims_ == params.rotaryDims && freqBase_ == params.freqBase && freqScale_ == params.freqScale &&
         attnFactor_ == params.attnFactor && positions_.size() == size_t(tokens) &&
         std::equal(positions_.begin(), positions_.end(), positions) &&
         (params.freqFactors
              ? factors_.size() == size_t(half) && std::equal(factors_.begin(), factors_.end(), params.freqFactors)
              : factors_.empty());
}

void RopeTable::compute(const int32_t* positions, int64_t tokens, const RopeParams& params) {
  const int half = params.rotaryDims / 2;
  positions_.assign(positions, positions + tokens);
  factors_ =
      params.freqFactors ? std::vector<float>(params.freqFactors, params.freqFactors + half) : std::vector<float>();
  rotaryDims_ = params.rotaryDims;
  freqBase_ = params.freqBase;
  freqScale_ = params.freqScale;
  attnFactor_ = params.attnFactor;
  values_.resize(size_t(tokens) * size_t(half) * 2);
  // Exactly the CPU device's arithmetic (kernels/cpu/cpu_device.cc): angles in double.
  for (int64_t t = 0; t < tokens; t++) {
    const double pos = double(positions[t]) * double(params.freqScale);
    for (int i = 0; i < half; i++) {
      double inv = std::pow(double(params.freqBase), -2.0 * i / double(params.rotaryDims));
      if (params.freqFactors) inv /= double(params.freqFactors[i]);
      values_[size_t(t * half + i) * 2] = float(std::cos(pos * inv)) * params.attnFactor;
      values_[size_t(t * half + i) * 2 + 1] = float(std::sin(pos * inv)) * params.attnFactor;
    }
  }
  generation_ = 0;
}

uint64_t RopeTable::address(const int32_t* positions, int64_t tokens, const RopeParams& params, CommandStream& stream) {
  if (!holds(positions, tokens, params)) compute(positions, tokens, params);
  if (generation_ != stream.arenaGeneration()) {
    const CommandStream::Upload up = stream.upload(values_.size() * sizeof(float));
    std::memcpy(up.host, values_.data(), values_.size() * sizeof(float));
    address_ = up.address;
    generation_ = stream.arenaGeneration();
  }
  return address_;
}

}  // namespace jitllm::vulkan
