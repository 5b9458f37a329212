// The dispatch shape of a matrix product - row groups per workgroup (WR) and rows per group (NR)
// of shaders/matmul.comp and matmul_int.comp - chosen by timing once per (device, kernel, shape)
// and remembered in the device's kernel cache directory (matmul-tuning.txt), so a machine pays
// for the timing once.
//
// These knobs never change a result's bits (each (row, token) is summed in the same order
// whatever the shape: the shaders' headers), which is what makes tuning safe: the device times
// the candidates on the product's own operands, writing its own output, and any of them is the
// answer. The device does the timing (it records the dispatches); this class holds the choices,
// the candidates and the file.
//
// File: one line per choice, "<key> <WR> <NR>"; a key names the kernel variant (shader, weight
// type, row length, tokens per workgroup, a hash of its source) and the row count. Lines that do
// not parse are ignored, so a damaged file only costs a re-timing.
//
// Ownership: a value (the choices); borrows nothing. Thread-safety: one thread at a time (the
// device's executor).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/vulkan/kernel_cache.h"

namespace jitllm::vulkan {

class MatmulTuner final {
 public:
  struct Shape {
    int wr = 2, nr = 2;
    bool operator==(const Shape&) const = default;
  };
  static constexpr Shape kDefault{2, 2};  // what an untuned device uses
  static constexpr const char* kFile = "matmul-tuning.txt";

  explicit MatmulTuner(KernelCache cache);

  std::optional<Shape> find(const std::string& key) const;
  // Keeps the choice and rewrites the file.
  void remember(const std::string& key, Shape shape);
  size_t size() const { return choices_.size(); }

  // The shapes worth timing for `tokensPerGroup` (TT) tokens on `device`: workgroups of at most
  // 256 invocations and reduction buffers (WR x NR x TT x 32 floats) within its shared memory.
  static std::vector<Shape> candidates(int tokensPerGroup, int lanes, const PhysicalDeviceDescription& device);

 private:
  KernelCache cache_;
  std::map<std::string, Shape> choices_;
};

}  // namespace jitllm::vulkan
