// The CPU device's rope keeps the angles of its last two parameter sets (cpu_device.h): a call
// must give the bits of a fresh device whatever came before it - other positions, other bases, the
// same factor array with other values, a gemma3-like alternation of two bases.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"

namespace jitllm::cpu {
namespace {

std::vector<float> rotated(CpuDevice& device, const std::vector<float>& x, int heads, int headDim,
                           const std::vector<int32_t>& positions, const RopeParams& params) {
  std::vector<float> out = x;
  device.rope(out.data(), int64_t(positions.size()), heads, headDim, positions.data(), params);
  return out;
}

TEST(CpuRope, ACallGivesAFreshDevicesBitsWhateverCallsCameBefore) {
  const int heads = 2, headDim = 64;
  std::mt19937 rng(4);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> factors(16, 1.0f);
  const std::vector<int32_t> p1 = {0, 1, 2, 3}, p2 = {4, 5, 6, 7}, p3 = {4, 5, 6, 7, 8};
  const RopeParams local{64, 10000.0f, 1.0f, nullptr, true};
  const RopeParams global{64, 1000000.0f, 1.0f, nullptr, true};
  const RopeParams scaled{64, 10000.0f, 0.5f, nullptr, true};
  const RopeParams withFactors{32, 500000.0f, 1.0f, factors.data(), false};
  const RopeParams attn{32, 500000.0f, 1.0f, factors.data(), false, 1.25f};
  struct Call {
    const char* what;
    RopeParams params;
    const std::vector<int32_t>* positions;
    float factor;  // every freqFactors value before the call
  };
  const Call calls[] = {
      {"local", local, &p1, 1},
      {"global, same positions", global, &p1, 1},
      {"local again", local, &p1, 1},
      {"global again", global, &p1, 1},
      {"next step", local, &p2, 1},
      {"one more token", local, &p3, 1},
      {"scaled positions", scaled, &p3, 1},
      {"factors", withFactors, &p3, 1},
      {"other factor values", withFactors, &p3, 2.5f},
      {"attention factor", attn, &p3, 2.5f},
  };
  CpuDeviceOptions o;
  o.threads = 2;
  CpuDevice device(o);
  for (const Call& c : calls) {
    SCOPED_TRACE(c.what);
    for (float& f : factors) f = c.factor;
    std::vector<float> x(c.positions->size() * heads * headDim);
    for (float& v : x) v = dist(rng);
    CpuDevice fresh(o);
    const std::vector<float> want = rotated(fresh, x, heads, headDim, *c.positions, c.params);
    const std::vector<float> got = rotated(device, x, heads, headDim, *c.positions, c.params);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
    ASSERT_NE(0, std::memcmp(got.data(), x.data(), x.size() * sizeof(float))) << "nothing rotated";
  }
}

}  // namespace
}  // namespace jitllm::cpu
