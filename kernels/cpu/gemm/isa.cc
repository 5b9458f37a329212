#include "kernels/cpu/gemm/isa.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define JITLLM_X86 1
#endif

namespace jitllm::cpu {
namespace {

#if JITLLM_X86
// XCR0: which register states the OS saves on a context switch.
__attribute__((target("xsave"))) uint64_t readXcr0() { return __builtin_ia32_xgetbv(0); }
#endif

const CpuFeatures& cachedFeatures() {
  // Immutable facts about the machine, computed once; not a registry of mutable state.
  static const CpuFeatures features = detectCpuFeatures();
  return features;
}

}  // namespace

CpuFeatures detectCpuFeatures() {
  CpuFeatures f;
#if JITLLM_X86
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  const bool avx = ecx & (1u << 28);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = readXcr0();
  const bool osAvx = (xcr0 & 0x6) == 0x6;       // XMM and YMM state
  const bool osAvx512 = (xcr0 & 0xe6) == 0xe6;  // plus opmask and both ZMM halves
  if (!osAvx) return f;
  f.fma = ecx & (1u << 12);
  f.f16c = ecx & (1u << 29);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    const unsigned maxSubleaf = eax;
    f.avx2 = ebx & (1u << 5);
    if (osAvx512) {
      f.avx512f = ebx & (1u << 16);
      f.avx512dq = ebx & (1u << 17);
      f.avx512bw = ebx & (1u << 30);
      f.avx512vl = ebx & (1u << 31);
      f.avx512vnni = ecx & (1u << 11);
      const bool amxTile = edx & (1u << 24), amxInt8 = edx & (1u << 25);
      const bool osAmx = (xcr0 & (3u << 17)) == (3u << 17);  // XTILECFG and XTILEDATA
      if (amxTile && amxInt8 && osAmx) {
        // Linux keeps tile data off until a process asks (5.16+); an older kernel or a refusal
        // (e.g. a sigaltstack too small for the tile state) leaves AMX unused.
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        f.amxInt8 = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
      }
    }
    if (maxSubleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
      f.avxVnni = eax & (1u << 4);
      f.avx512bf16 = osAvx512 && (eax & (1u << 5));
    }
  }
#endif
  return f;
}

bool isaRuns(Isa isa, const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvxVnni:
      return avx2 && f.avxVnni;
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx512Vnni:
      return avx512 && f.avx512vnni;
    case Isa::kAvx512Bf16:
      return avx512 && f.avx512vnni && f.avx512bf16;
    case Isa::kAvx512Amx:
      return avx512 && f.avx512vnni && f.avx512bf16 && f.amxInt8;
  }
  return false;
}

Isa fastestIsa(const CpuFeatures& f) {
  // AVX-512 without VNNI (Skylake-SP) multiplies quantized weights in float: an AVX-VNNI CPU
  // never lacks AVX-512 VNNI while having AVX-512, so the order below is the speed order.
  for (Isa isa : {Isa::kAvx512Amx, Isa::kAvx512Bf16, Isa::kAvx512Vnni, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx2}) {
    if (isaRuns(isa, f)) return isa;
  }
  return Isa::kScalar;
}

bool isaSupported(Isa isa) { return isaRuns(isa, cachedFeatures()); }

Isa bestIsa() {
  const Isa best = fastestIsa(cachedFeatures());
  const char* forced = std::getenv("JITLLM_ISA");
  if (forced == nullptr || *forced == '\0') return best;
  std::string names, here;
  for (Isa isa : kAllIsas) {
    names += std::string(names.empty() ? "" : ", ") + isaName(isa);
    if (isaSupported(isa)) here += std::string(here.empty() ? "" : ", ") + isaName(isa);
  }
  const std::optional<Isa> wanted = parseIsaName(forced);
  JITLLM_REQUIRE(wanted.has_value(), "JITLLM_ISA=", forced, " is not one of ", names);
  JITLLM_REQUIRE(isaSupported(*wanted), "JITLLM_ISA=", forced, " asks for kernels this CPU cannot run; it runs ", here);
  return *wanted;
}

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kAvx512Amx:
      return "avx512amx";
  }
  return "unknown";
}

std::optional<Isa> parseIsaName(std::string_view name) {
  for (Isa isa : kAllIsas) {
    if (name == isaName(isa)) return isa;
  }
  return std::nullopt;
}

}  // namespace jitllm::cpu
