// The portable matmulRows: any CPU, every computable type through the reference dequantizer.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/quant/dequantize.h"

namespace jitllm::cpu::detail {
namespace {

// Eight float lanes in plain C++ (compilers turn the lane loops into SSE). No fused multiply-add:
// the baseline x86-64 has none and std::fma would be a slow library call there.
struct ScalarVec {
  static constexpr int kLanes = 8;
  static constexpr int kRowTile = 4;
  static constexpr int kTokenTile = 2;
  struct Reg {
    float v[kLanes];
  };
  static Reg zero() { return Reg{}; }
  static Reg load(const float* p) {
    Reg r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static Reg loadPartial(const float* p, int n) {
    Reg r{};
    std::memcpy(r.v, p, size_t(n) * sizeof(float));
    return r;
  }
  static void store(float* p, const Reg& r) { std::memcpy(p, r.v, sizeof r.v); }
  static Reg fma(const Reg& a, const Reg& b, const Reg& c) {
    Reg r;
    for (int i = 0; i < kLanes; i++) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
  }
  static float sum(const Reg& r) {
    // The same tree as the AVX2 reduction: halves, then pairs, then the last two.
    const float a0 = r.v[0] + r.v[4], a1 = r.v[1] + r.v[5], a2 = r.v[2] + r.v[6], a3 = r.v[3] + r.v[7];
    return (a0 + a2) + (a1 + a3);
  }
};

#include "kernels/cpu/gemm/matmul_driver.inc"

}  // namespace

void matmulRowsScalar(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd) {
  referenceRows<ScalarVec>(w, x, xStride, nTokens, y, yStride, rowBegin, rowEnd);
}

}  // namespace jitllm::cpu::detail
