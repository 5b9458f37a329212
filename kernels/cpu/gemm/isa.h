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
// reproducible for a given Isa and may differ (by rounding) between Isas. The integer kernels
// (q4_0, q4_K, q5_K, q6_K and q8_0 on kAvx2, kAvxVnni, kAvx512Vnni, kAvx512Bf16 and kAvx512Amx)
// share one contract (matmul_int8.inc) and give the same bits on all five.
//
// The order below is by width, not a chain of supersets: a CPU may have kAvx512Vnni without
// kAvxVnni (Ice Lake, Zen 4). isaSupported says what runs here.
enum class Isa {
  kScalar,  // portable C++, any x86-64 (and any other CPU)
  // AVX2 + FMA + F16C (Haswell and later, Zen): float kernels, and the integer contract for
  // q4_0, q4_K, q5_K, q6_K and q8_0 with vpmaddubsw (matmul_int8_256.inc).
  kAvx2,
  // kAvx2 plus AVX-VNNI, vpdpbusd on ymm (Alder Lake and later, Zen 5): the integer products on it.
  kAvxVnni,
  kAvx512,  // AVX-512 F/BW/VL/DQ + FMA + F16C (Skylake-SP and later, Zen 4): float kernels
  // kAvx512 plus VNNI (Cascade Lake, Ice Lake and later, Zen 4): q4_K, q6_K and q8_0 weights
  // multiply activations held as two int8 vectors per block (about 15 bits, see
  // matmul_avx512vnni.cc) with integer dot products, q4_0 and q5_K on the 256-bit kernels of the
  // same contract; other types run the kAvx512 kernels.
  kAvx512Vnni,
  // kAvx512Vnni plus AVX-512 BF16 (Cooper Lake, Sapphire Rapids and later, Zen 4): BF16 weights
  // on vdpbf16ps with each activation split in two bf16 halves (matmul_avx512bf16.cc: their own
  // bits, ~16-bit activations); every other type as kAvx512Vnni, with its bits.
  kAvx512Bf16,
  // kAvx512Bf16 plus AMX-INT8 with the OS's permission for tile data (Sapphire Rapids and later):
  // prefill of those three types on the tile unit (matmul_amx.cc), with the same bits as
  // kAvx512Vnni; decode is kAvx512Vnni's, BF16 weights kAvx512Bf16's. (Every CPU with AMX has
  // AVX-512 BF16; one without would be offered kAvx512Vnni.)
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
  bool avxVnni = false;  // the VEX (256-bit) form of vpdpbusd
  // AMX tiles with int8 products that this process may use: the CPU has AMX-TILE and AMX-INT8,
  // XCR0 enables the tile state, and Linux granted the tile data permission (arch_prctl
  // ARCH_REQ_XCOMP_PERM, which detectCpuFeatures requests; without it the first tile instruction
  // would kill the process).
  bool amxInt8 = false;
};

// Asks CPUID (and XGETBV for OS support of the AVX / AVX-512 register state), and Linux for the
// AMX tile data permission when the CPU has AMX (granting it is process-wide and idempotent).
CpuFeatures detectCpuFeatures();

// The fastest Isa this CPU supports, or the one the environment variable
// JITLLM_ISA=scalar|avx2|avxvnni|avx512|avx512vnni|avx512bf16|avx512amx names (to compare paths, or run a
// slower one). Throws FAILED for an unknown name and for an Isa this CPU cannot run, naming the
// ones it can: a forced path is never silently replaced by another.
Isa bestIsa();

// The fastest Isa these features support.
Isa fastestIsa(const CpuFeatures& features);
// Whether kernels of this Isa can run on a CPU with these features.
bool isaRuns(Isa isa, const CpuFeatures& features);
// isaRuns on this CPU (ignores JITLLM_ISA). Detection runs once per process.
bool isaSupported(Isa isa);

// Every Isa, in the enum's order.
inline constexpr Isa kAllIsas[] = {Isa::kScalar,     Isa::kAvx2,       Isa::kAvxVnni,  Isa::kAvx512,
                                   Isa::kAvx512Vnni, Isa::kAvx512Bf16, Isa::kAvx512Amx};

const char* isaName(Isa isa);
std::optional<Isa> parseIsaName(std::string_view name);

}  // namespace jitllm::cpu
