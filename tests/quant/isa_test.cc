#include "kernels/cpu/gemm/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace jitllm::cpu {
namespace {

// Sets JITLLM_ISA for one scope and restores what was there, so tests run in one process do not
// leak the override into each other.
class ScopedIsaEnv final {
 public:
  explicit ScopedIsaEnv(const char* value) {
    if (const char* old = std::getenv("JITLLM_ISA")) saved_ = old;
    if (value) {
      setenv("JITLLM_ISA", value, 1);
    } else {
      unsetenv("JITLLM_ISA");
    }
  }
  ~ScopedIsaEnv() {
    if (saved_) {
      setenv("JITLLM_ISA", saved_->c_str(), 1);
    } else {
      unsetenv("JITLLM_ISA");
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(Isa, DetectedFeaturesAreConsistentWithTheChosenIsa) {
  const CpuFeatures f = detectCpuFeatures();
  ScopedIsaEnv env(nullptr);
  const Isa best = bestIsa();
  EXPECT_EQ(best, fastestIsa(f));
  EXPECT_TRUE(isaSupported(best));
  EXPECT_TRUE(isaSupported(Isa::kScalar));
  EXPECT_EQ(isaSupported(Isa::kAvx2), f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(isaSupported(Isa::kAvxVnni), f.avx2 && f.fma && f.f16c && f.avxVnni);
  EXPECT_EQ(isaSupported(Isa::kAvx512),
            f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_EQ(isaSupported(Isa::kAvx512Vnni), isaSupported(Isa::kAvx512) && f.avx512vnni);
  EXPECT_EQ(isaSupported(Isa::kAvx512Amx), isaSupported(Isa::kAvx512Vnni) && f.amxInt8);
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
  CpuFeatures iceLake = skylakeSp;  // and Zen 4: AVX-512 VNNI but no AVX-VNNI
  iceLake.avx512vnni = true;
  EXPECT_EQ(fastestIsa(iceLake), Isa::kAvx512Vnni);
  EXPECT_FALSE(isaRuns(Isa::kAvxVnni, iceLake));
  CpuFeatures sapphireRapids = iceLake;
  sapphireRapids.avxVnni = sapphireRapids.amxInt8 = true;
  EXPECT_EQ(fastestIsa(sapphireRapids), Isa::kAvx512Amx);
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
    ScopedIsaEnv env(nullptr);
    best = bestIsa();
  }
  for (Isa isa : kAllIsas) {
    SCOPED_TRACE(isaName(isa));
    ScopedIsaEnv env(isaName(isa));
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
    ScopedIsaEnv env("");
    EXPECT_EQ(bestIsa(), best);
  }
}

TEST(Isa, AnUnknownJitllmIsaValueIsAnErrorNotASilentDefault) {
  ScopedIsaEnv env("avx1024");
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
