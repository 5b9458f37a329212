// The prompt rows a backend with a prompt path was given (Device::setPromptRows): checked, kept
// until the next call, and walked as runs of rows when a product splits between its prompt path
// and its ordinary one. Shared by the CPU and CUDA devices.
//
// Thread-safety: plain values; a device keeps them for its executor thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/error.h"
#include "kernels/device.h"

namespace jitllm {

class PromptRows {
 public:
  // Keeps `ranges` for products over `tokens` rows, after checking Device::setPromptRows'
  // contract (sorted, disjoint, non-empty ranges within [0, tokens)); empty: none.
  void set(std::span<const Device::RowRange> ranges, int64_t tokens, const DeviceId& device) {
    int64_t last = 0;
    for (const Device::RowRange& r : ranges) {
      JITLLM_REQUIRE(r.begin >= last && r.begin < r.end && r.end <= tokens, device,
                     ": prompt rows must be sorted, disjoint, non-empty ranges within ", tokens, " tokens");
      last = r.end;
    }
    ranges_.assign(ranges.begin(), ranges.end());
    tokens_ = ranges.empty() ? 0 : tokens;
  }

  // Whether a product over `tokens` rows has prompt rows.
  bool in(int64_t tokens) const { return !ranges_.empty() && tokens == tokens_; }

  // run(begin, end, prompt) for the consecutive runs of rows that cover [0, tokens) in order: the
  // rows before a prompt range (prompt false), the range (true), ..., the rows after the last.
  template <class Run>
  void forEachRun(int64_t tokens, Run&& run) const {
    int64_t next = 0;
    for (const Device::RowRange& r : ranges_) {
      if (r.begin > next) run(next, r.begin, false);
      run(r.begin, r.end, true);
      next = r.end;
    }
    if (tokens > next) run(next, tokens, false);
  }

 private:
  std::vector<Device::RowRange> ranges_;
  int64_t tokens_ = 0;
};

}  // namespace jitllm
