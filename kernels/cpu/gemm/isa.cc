#include "kernels/cpu/gemm/isa.h"

#include <cstdint>
#include <cstdlib>

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

Isa bestSupportedIsa(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) {
    if (!f.avx512vnni) return Isa::kAvx512;
    return f.amxInt8 ? Isa::kAvx512Amx : Isa::kAvx512Vnni;
  }
  if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

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
    f.avx2 = ebx & (1u << 5);
    if (osAvx512) {
      f.avx512f = ebx & (1u << 16);
      f.avx512dq = ebx & (1u << 17);
      f.avx512bw = ebx & (1u << 30);
      f.avx512vl = ebx & (1u << 31);
      f.avx512vnni = ecx & (1u << 11);
      const unsigned maxSubleaf = eax;
      const bool amxTile = edx & (1u << 24), amxInt8 = edx & (1u << 25);
      const bool osAmx = (xcr0 & (3u << 17)) == (3u << 17);  // XTILECFG and XTILEDATA
      if (amxTile && amxInt8 && osAmx) {
        // Linux keeps tile data off until a process asks (5.16+); an older kernel or a refusal
        // (e.g. a sigaltstack too small for the tile state) leaves AMX unused.
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        f.amxInt8 = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
      }
      if (maxSubleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
        f.avx512bf16 = eax & (1u << 5);
      }
    }
  }
#endif
  return f;
}

bool isaSupported(Isa isa) { return int(isa) <= int(bestSupportedIsa(cachedFeatures())); }

Isa bestIsa() {
  const Isa best = bestSupportedIsa(cachedFeatures());
  const char* forced = std::getenv("JITLLM_ISA");
  if (forced == nullptr || *forced == '\0') return best;
  const std::optional<Isa> wanted = parseIsaName(forced);
  JITLLM_REQUIRE(wanted.has_value(), "JITLLM_ISA=", forced,
                 " is not one of scalar, avx2, avx512, avx512vnni, avx512amx");
  return int(*wanted) < int(best) ? *wanted : best;
}

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx512Amx:
      return "avx512amx";
  }
  return "unknown";
}

std::optional<Isa> parseIsaName(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Amx}) {
    if (name == isaName(isa)) return isa;
  }
  return std::nullopt;
}

}  // namespace jitllm::cpu
