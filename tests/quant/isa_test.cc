#include "kernels/cpu/gemm/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "tests/scoped_test_state.h"

namespace jitllm::cpu {
namespace {

using jitllm::testing::ScopedEnv;  // JITLLM_ISA for one scope, so tests in one process do not leak it

TEST(Isa, DetectedFeaturesAreConsistentWithTheChosenIsa) {
  const CpuFeatures f = detectCpuFeatures();
  const ScopedEnv env("JITLLM_ISA", std::nullopt);
  const Isa best = bestIsa();
  EXPECT_EQ(best, fastestIsa(f));
  EXPECT_TRUE(isaSupported(best));
  EXPECT_TRUE(isaSupported(Isa::kScalar));
  EXPECT_EQ(isaSupported(Isa::kAvx2), f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(isaSupported(Isa::kAvxVnni), f.avx2 && f.fma && f.f16c && f.avxVnni);
  EXPECT_EQ(isaSupported(Isa::kAvx512),
            f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_EQ(isaSupported(Isa::kAvx512Vnni), isaSupported(Isa::kAvx512) && f.avx512vnni);
  EXPECT_EQ(isaSupported(Isa::kAvx512Bf16), isaSupported(Isa::kAvx512Vnni) && f.avx512bf16);
  EXPECT_EQ(isaSupported(Isa::kAvx512Amx), isaSupported(Isa::kAvx512Bf16) && f.amxInt8);
  std::printf("best isa here: %s (avx-vnni %d, avx512-vnni %d, bf16 %d, amx-int8 usable %d)\n", isaName(best),
              f.avxVnni, f.avx512vnni, f.avx512bf16, f.amxInt8);
}

// The choice follows the CPU's features, never a model name or a fixed list of CPUs: the CPUs
// people own, as features, and the path each must get.
TEST(Isa, TheFastestPathFollowsTheFeatures) {
  CpuFeatures haswell;  // and Zen 1-3: AVX2 only
  haswell.avx2 = haswell.fma = haswell.f16c = true;
  EXPECT_EQ(fastestIsa(haswell), Isa::kAvx2);
  CpuFeatures alderLake = haswell;  // and Zen 5 laptops without AVX-512
  alderLake.avxVnni = true;
  EXPECT_EQ(fastestIsa(alderLake), Isa::kAvxVnni);
  CpuFeatures skylakeSp = haswell;
  skylakeSp.avx512f = skylakeSp.avx512bw = skylakeSp.avx512vl = skylakeSp.avx512dq = true;
  EXPECT_EQ(fastestIsa(skylakeSp), Isa::kAvx512);
  CpuFeatures iceLake = skylakeSp;  // AVX-512 VNNI but neither AVX-VNNI nor BF16
  iceLake.avx512vnni = true;
  EXPECT_EQ(fastestIsa(iceLake), Isa::kAvx512Vnni);
  EXPECT_FALSE(isaRuns(Isa::kAvxVnni, iceLake));
  CpuFeatures zen4 = iceLake;  // and Cooper Lake: AVX-512 BF16 too
  zen4.avx512bf16 = true;
  EXPECT_EQ(fastestIsa(zen4), Isa::kAvx512Bf16);
  EXPECT_TRUE(isaRuns(Isa::kAvx512Vnni, zen4));
  CpuFeatures sapphireRapids = zen4;
  sapphireRapids.avxVnni = sapphireRapids.amxInt8 = true;
  EXPECT_EQ(fastestIsa(sapphireRapids), Isa::kAvx512Amx);
  CpuFeatures amxWithoutBf16 = sapphireRapids;  // no such CPU; a VM could mask the feature
  amxWithoutBf16.avx512bf16 = false;
  EXPECT_EQ(fastestIsa(amxWithoutBf16), Isa::kAvx512Vnni);
  CpuFeatures noFma = haswell;  // AVX2 without FMA is no AVX2 path
  noFma.fma = false;
  EXPECT_EQ(fastestIsa(noFma), Isa::kScalar);
  EXPECT_EQ(fastestIsa(CpuFeatures{}), Isa::kScalar);
}

// JITLLM_ISA picks any path this CPU runs, and refuses by name one it cannot: a forced path is
// never silently swapped for another.
TEST(Isa, JitllmIsaForcesAnySupportedPathAndRefusesTheOthersByName) {
  Isa best;
  {
    const ScopedEnv env("JITLLM_ISA", std::nullopt);
    best = bestIsa();
  }
  for (Isa isa : kAllIsas) {
    SCOPED_TRACE(isaName(isa));
    const ScopedEnv env("JITLLM_ISA", isaName(isa));
    if (isaSupported(isa)) {
      EXPECT_EQ(bestIsa(), isa);
    } else {
      try {
        bestIsa();
        ADD_FAILURE() << "an unsupported JITLLM_ISA was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(isaName(isa)), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
      }
    }
  }
  {
    const ScopedEnv env("JITLLM_ISA", "");
    EXPECT_EQ(bestIsa(), best);
  }
}

TEST(Isa, AnUnknownJitllmIsaValueIsAnErrorNotASilentDefault) {
  const ScopedEnv env("JITLLM_ISA", "avx1024");
  EXPECT_THROW(bestIsa(), Error);
}

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : kAllIsas) {
    EXPECT_EQ(parseIsaName(isaName(isa)), isa);
  }
  EXPECT_FALSE(parseIsaName("AVX2").has_value());
}

}  // namespace
}  // namespace jitllm::cpu
