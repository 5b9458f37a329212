// The exponent rule of the integer kernels' activations (matmul_int8.inc): per block of 32, a
// power of two 2^e with max|x| / 2^e in [64, 128) and max|x| <= 127 * 2^e, so that round(x / 2^e)
// fits in int8 with about 7 bits and the residual b another 8.
//
// Portable and header-only so that every instruction set's quantizer (and the tests' reference
// of the contract) uses one rule. Include it before a file's target pragma: it must be compiled
// for the baseline, since the linker keeps one copy of an inline function.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace jitllm::cpu {

// 2^n, exactly (std::ldexp's value; without its call where the result is a normal float, since
// quantizers ask for two of these per block of 32).
inline float powerOfTwo(int n) {
  if (n < -126 || n > 127) return std::ldexp(1.0f, n);
  return std::bit_cast<float>(uint32_t(n + 127) << 23);
}

// e for a block whose largest magnitude is amax (finite, >= 0); 0 for an all-zero block.
inline int activationExponent(float amax) {
  if (!(amax > 0)) return 0;
  int exponent;  // amax = m * 2^exponent, m in [0.5, 1)
  const uint32_t bits = std::bit_cast<uint32_t>(amax);
  if ((bits >> 23) != 0) {
    exponent = int(bits >> 23) - 126;  // a normal float: the biased exponent field
  } else {
    std::frexp(amax, &exponent);
  }
  int e = exponent - 7;  // amax / 2^e in [64, 128)
  // 127 * 2^e, rounded as std::ldexp(127, e) rounds it (exact while 2^e is a normal float).
  const float limit = e >= -126 ? 127.0f * powerOfTwo(e) : std::ldexp(127.0f, e);
  if (amax > limit) e++;
  return e;
}

// x / 2^e as two exact multiplies, x * pre * inv: 2^-e alone overflows float for blocks of tiny
// (subnormal) values, where e < -127. pre is 1 otherwise, and then the first multiply is skipped.
struct BlockScaling {
  float pre;
  float inv;
};

inline BlockScaling blockScaling(int e) {
  if (-e > 127) return {0x1p64f, powerOfTwo(-e - 64)};
  return {1.0f, powerOfTwo(-e)};
}

}  // namespace jitllm::cpu
