// RoPE's cos/sin table for a Vulkan device's rope op: computed on the host for the last
// (positions, params) seen, in exactly the CPU device's arithmetic (angles in double), and kept
// in the command stream's upload arena. Every layer of a step rotates the same positions, so the
// table is computed once per step and uploaded again only when the arena was recycled.
//
// Ownership: a value; the upload lives in the stream's arena. Thread-safety: the executor thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/device.h"
#include "kernels/vulkan/command_stream.h"

namespace jitllm::vulkan {

class RopeTable final {
 public:
  // The table's device address for `tokens` positions under params, computed if they are not
  // the last ones, uploaded if the arena no longer holds it (one upload() of the op's).
  uint64_t address(const int32_t* positions, int64_t tokens, const RopeParams& params, CommandStream& stream);

 private:
  bool holds(const int32_t* positions, int64_t tokens, const RopeParams& params) const;
  void compute(const int32_t* positions, int64_t tokens, const RopeParams& params);

  std::vector<int32_t> positions_;
  std::vector<float> factors_;
  int rotaryDims_ = 0;
  float freqBase_ = 0, freqScale_ = 0, attnFactor_ = 0;
  std::vector<float> values_;  // (cos, sin) per (token, i)
  uint64_t address_ = 0;
  uint64_t generation_ = 0;  // the arena generation address_ is valid in; 0: not uploaded
};

}  // namespace jitllm::vulkan
