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
  EXPECT_TRUE(isaSupported(best));
  EXPECT_TRUE(isaSupported(Isa::kScalar));
  if (best >= Isa::kAvx512) {
    EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c);
  }
  if (best >= Isa::kAvx512Vnni) {
    EXPECT_TRUE(f.avx512vnni);
  }
  if (best == Isa::kAvx512Amx) {
    EXPECT_TRUE(f.amxInt8);
  }
  if (best >= Isa::kAvx2) {
    EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
  }
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) {
    EXPECT_EQ(best, !f.avx512vnni ? Isa::kAvx512 : f.amxInt8 ? Isa::kAvx512Amx : Isa::kAvx512Vnni);
  }
  std::printf("best isa here: %s (vnni %d, bf16 %d, amx-int8 usable %d)\n", isaName(best), f.avx512vnni, f.avx512bf16,
              f.amxInt8);
}

TEST(Isa, JitllmIsaLowersTheChoiceButNeverRaisesItAboveTheCpu) {
  Isa best;
  {
    ScopedIsaEnv env(nullptr);
    best = bestIsa();
  }
  {
    ScopedIsaEnv env("scalar");
    EXPECT_EQ(bestIsa(), Isa::kScalar);
  }
  {
    ScopedIsaEnv env("avx2");
    EXPECT_EQ(bestIsa(), best >= Isa::kAvx2 ? Isa::kAvx2 : best);
  }
  {
    ScopedIsaEnv env("avx512");
    EXPECT_EQ(bestIsa(), best >= Isa::kAvx512 ? Isa::kAvx512 : best);
  }
  {
    ScopedIsaEnv env("avx512vnni");
    EXPECT_EQ(bestIsa(), best >= Isa::kAvx512Vnni ? Isa::kAvx512Vnni : best);
  }
  {
    ScopedIsaEnv env("avx512amx");
    EXPECT_EQ(bestIsa(), best);
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
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Amx}) {
    EXPECT_EQ(parseIsaName(isaName(isa)), isa);
  }
  EXPECT_FALSE(parseIsaName("AVX2").has_value());
}

}  // namespace
}  // namespace jitllm::cpu
