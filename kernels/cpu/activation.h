// The gated activations on the CPU: SwiGLU, out[i] = gate[i] / (1 + exp(-gate[i])) * up[i], and
// GEGLU with GELU's tanh form, out[i] = g / (1 + exp(-z)) * up[i] with g = gate[i] and
// z = 1.5957691216 (g + 0.044715 g^3) (0.5 (1 + tanh(y)) is 1 / (1 + exp(-2y))).
//
// Determinism: an element's result depends only on its two inputs and the Isa, never on how n
// is split among threads (the vector variant covers a tail with masked lanes, not with the
// scalar formula). The AVX-512 variant computes exp with its own polynomial (within 2 ulp of
// std::exp; overflow to inf and NaN propagate as std::exp's do), so it differs from the scalar
// variant by rounding, like every other per-Isa kernel. GEGLU also has an AVX2 variant (exp8, the same polynomial).
//
// Thread-safety: pure function of its arguments; disjoint ranges may run concurrently.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/isa.h"

namespace jitllm::cpu {

void swigluRange(const float* gate, const float* up, float* out, int64_t begin, int64_t end, Isa isa);
void gegluRange(const float* gate, const float* up, float* out, int64_t begin, int64_t end, Isa isa);

}  // namespace jitllm::cpu
