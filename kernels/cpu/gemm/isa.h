// Which x86-64 vector instruction sets the CPU kernels may use, found at run time.
//
// One jitllm binary runs on any x86-64: kernels for AVX2 and AVX-512 are compiled into it with
// per-function target attributes and are only called when detectCpuFeatures() says the CPU (and
// the OS, which must save the wider registers) supports them.
//
// Thread-safety: all functions may be called from any thread.
#pragma once

#include <optional>
#include <string_view>

namespace jitllm::cpu {

// A kernel variant. Each one has its own fixed summation order, so results are bitwise
// reproducible for a given Isa and may differ (by rounding) between Isas.
enum class Isa {
  kScalar,  // portable C++, any x86-64 (and any other CPU)
  kAvx2,    // AVX2 + FMA + F16C (Haswell and later, Zen)
  kAvx512,  // AVX-512 F/BW/VL/DQ + FMA + F16C (Skylake-SP and later, Zen 4)
  // kAvx512 plus VNNI (Cascade Lake, Ice Lake and later, Zen 4): q4_K, q6_K and q8_0 weights
  // multiply activations held as two int8 vectors per block (about 15 bits, see
  // matmul_avx512vnni.cc) with integer dot products; other types run the kAvx512 kernels.
  kAvx512Vnni,
  // kAvx512Vnni plus AMX-INT8 with the OS's permission for tile data (Sapphire Rapids and later):
  // prefill of those three types on the tile unit (matmul_amx.cc), with the same bits as
  // kAvx512Vnni; decode is kAvx512Vnni's.
  kAvx512Amx,
};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  // AMX tiles with int8 products that this process may use: the CPU has AMX-TILE and AMX-INT8,
  // XCR0 enables the tile state, and Linux granted the tile data permission (arch_prctl
  // ARCH_REQ_XCOMP_PERM, which detectCpuFeatures requests; without it the first tile instruction
  // would kill the process).
  bool amxInt8 = false;
};

// Asks CPUID (and XGETBV for OS support of the AVX / AVX-512 register state), and Linux for the
// AMX tile data permission when the CPU has AMX (granting it is process-wide and idempotent).
CpuFeatures detectCpuFeatures();

// The best Isa of this CPU, lowered to the one named by the environment variable
// JITLLM_ISA=scalar|avx2|avx512|avx512vnni|avx512amx when that is set (tests use it to exercise every variant; asking
// for more than the CPU has gives what it has). Throws FAILED for any other JITLLM_ISA value.
Isa bestIsa();

// Whether kernels of this Isa can run here (ignores JITLLM_ISA). Detection runs once per process.
bool isaSupported(Isa isa);

const char* isaName(Isa isa);
std::optional<Isa> parseIsaName(std::string_view name);

}  // namespace jitllm::cpu
