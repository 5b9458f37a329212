#include "kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace jitllm::cpu {
namespace {

// The two gated activations, their float64 references and their exponents' size (the error of
// exp(-z) grows with |z|, since z itself is rounded).
struct Activation {
  const char* name;
  void (*range)(const float*, const float*, float*, int64_t, int64_t, Isa);
  double (*exponent)(double g);
  double (*reference)(double g, double u);
};
const Activation kActivations[] = {
    {"swiglu", swigluRange, [](double g) { return g; },
     [](double g, double u) { return g / (1.0 + std::exp(-g)) * u; }},
    {"geglu", gegluRange, [](double g) { return 1.5957691216057308 * (g + 0.044715 * g * g * g); },
     // 0.5 g (1 + tanh(y)) as g / (1 + exp(-2y)): the tanh form cancels to 0 in float64 too.
     [](double g, double u) { return g / (1.0 + std::exp(-1.5957691216057308 * (g + 0.044715 * g * g * g))) * u; }},
};

std::vector<Isa> isasHere() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (isaSupported(isa)) out.push_back(isa);
  }
  return out;
}

// Inputs over the range activations take, and the edges: zeros, tiny, huge, both infinities, NaN.
std::vector<float> gates(size_t n) {
  std::mt19937 rng(12);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> g(n);
  for (float& v : g) v = dist(rng);
  const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, 89.0f, -89.0f, 104.0f, -104.0f, 1e30f, -1e30f};
  for (size_t i = 0; i < std::size(edges); i++) g[i] = edges[i];
  return g;
}

TEST(GatedActivations, EveryIsaIsWithinAFewUlpOfTheExactFunction) {
  const std::vector<float> g = gates(4099);
  std::vector<float> u(g.size());
  for (size_t i = 0; i < u.size(); i++) u[i] = 0.5f + float(i % 7);
  for (const Activation& a : kActivations) {
    for (Isa isa : isasHere()) {
      SCOPED_TRACE(std::string(a.name) + " " + isaName(isa));
      std::vector<float> out(g.size(), NAN);
      a.range(g.data(), u.data(), out.data(), 0, int64_t(g.size()), isa);
      for (size_t i = 0; i < g.size(); i++) {
        const double want = a.reference(g[i], u[i]);
        // 2 ulp of exp, a division and a product: within 6 ulp of the float64 result, plus the
        // rounding of the exponent z, which exp magnifies |z| times (and zeros where the exact
        // result underflows).
        const double z = std::min(std::fabs(a.exponent(g[i])), 200.0);
        const double ulps = 6 + 4 * z;
        ASSERT_NEAR(out[i], want, ulps * std::numeric_limits<float>::epsilon() * std::fabs(want) + 1e-37)
            << "gate " << g[i] << " up " << u[i];
      }
    }
  }
}

TEST(GatedActivations, InfinitiesAndNanFollowTheFormula) {
  const float g[] = {INFINITY, -INFINITY, NAN, 1.0f, 2.0f};
  const float u[] = {2.0f, 2.0f, 1.0f, NAN, INFINITY};
  for (const Activation& a : kActivations) {
    for (Isa isa : isasHere()) {
      SCOPED_TRACE(std::string(a.name) + " " + isaName(isa));
      float out[5];
      a.range(g, u, out, 0, 5, isa);
      EXPECT_EQ(out[0], INFINITY);      // inf / (1 + 0) * 2
      EXPECT_TRUE(std::isnan(out[1]));  // -inf / (1 + inf), as std::exp gives it
      EXPECT_TRUE(std::isnan(out[2]));
      EXPECT_TRUE(std::isnan(out[3]));
      EXPECT_EQ(out[4], INFINITY);
    }
  }
}

// Threads split n anywhere: an element's bits may not depend on where its range starts or ends.
TEST(GatedActivations, ResultsDoNotDependOnHowTheRangeIsSplit) {
  const std::vector<float> g = gates(1000);
  std::vector<float> u(g.size(), 1.5f);
  for (const Activation& a : kActivations) {
    for (Isa isa : isasHere()) {
      SCOPED_TRACE(std::string(a.name) + " " + isaName(isa));
      std::vector<float> whole(g.size()), pieces(g.size());
      a.range(g.data(), u.data(), whole.data(), 0, int64_t(g.size()), isa);
      for (int64_t begin = 0, step = 1; begin < int64_t(g.size()); step = step % 23 + 1) {
        const int64_t end = std::min<int64_t>(int64_t(g.size()), begin + step);
        a.range(g.data(), u.data(), pieces.data(), begin, end, isa);
        begin = end;
      }
      EXPECT_EQ(0, std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace jitllm::cpu
