// q4_0, q5_0, q4_K, q5_K, q6_K and q8_0 on AVX-512 VL + VNNI (vpdpbusd on ymm, EVEX) with the
// integer contract in 256-bit registers (matmul_int8_256.inc): the narrow kernels of CPUs with
// AVX-512 VNNI (cpu_tuning.h's narrowInt8, and the types with no 512-bit form), the bits of every
// other integer path. Other types take the AVX2 float kernels.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/gemm/int8_activation.h"
#include "kernels/cpu/gemm/matmul_variants.h"
#include "kernels/cpu/gemm/packed_rows.h"
#include "kernels/quant/blocks.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
#endif

namespace jitllm::cpu::detail {
namespace {

constexpr bool kDotVnni = true;
constexpr bool kDotEvex = true;
#include "kernels/cpu/gemm/matmul_int8_256.inc"

}  // namespace

const Int8Kernels256 kInt8NarrowVnni = kThisCompile;

}  // namespace jitllm::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
