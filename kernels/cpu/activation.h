// The SwiGLU activation on the CPU: out[i] = gate[i] / (1 + exp(-gate[i])) * up[i].
//
// Determinism: an element's result depends only on its two inputs and the Isa, never on how n
// is split among threads (the vector variant covers a tail with masked lanes, not with the
// scalar formula). The AVX-512 variant computes exp with its own polynomial (within 2 ulp of
// std::exp; overflow to inf and NaN propagate as std::exp's do), so it differs from the scalar
// variant by rounding, like every other per-Isa kernel.
//
// Thread-safety: pure function of its arguments; disjoint ranges may run concurrently.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/isa.h"

namespace jitllm::cpu {

void swigluRange(const float* gate, const float* up, float* out, int64_t begin, int64_t end, Isa isa);

}  // namespace jitllm::cpu
