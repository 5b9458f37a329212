// Activations in the integer form the integer matrix products read (matmul_int.cuh): ~15 bits
// per element, the scheme of the CPU's VNNI kernels (docs/cpu-kernels.md).
//
// Per token row and per block of 32 columns: s = a power of two with max|x| / s <= 127,
// a = round(x / s), b = round(256 (x / s - a)) clamped to +-127, so x ~= s (a + b / 256) with an
// error of at most s / 512. Every step before the rounding of b is exact (power-of-two scaling,
// exact residual). Rounding is to nearest even (__float2int_rn), as the CPU's cvtps2dq.
//
// Row layout (quantizedRowBytes(K) = 2.75 K bytes, kernels/quantized_input.h; K a multiple of
// 32), every part 8-byte aligned:
//   a[K] int8 | b[K] int8 | s256[K/32] float: s / 256 | bsum[K/32] float: s / 256 * sum(256a + b)
//   | sum8[K/8] int32: sum of (256 a + b) over each 8 columns
// A block holding inf or NaN gets that value as s256 and bsum, so it reaches every result.
//
// Deterministic: each token row is quantized alone, the same way whatever the batch, and by
// whichever kernel does it (quantize_x, or a producer fused with it: elementwise.cuh).

// 2^e for e in [-126, 127], exactly.
JL_DEV float pow2f(int e) { return __int_as_float((e + 127) << 23); }

// Called by all 32 lanes of a warp, lane l holding v = x[col0 + l] of the token row `row` (K
// columns): writes that 32-column block's part of the row's integer form.
JL_DEV void quantizeBlock32(float v, u8* row, int k, int col0) {
  const int lane = threadIdx.x & 31;
  const u32 bits = __float_as_uint(v) & 0x7fffffffu;
  const unsigned bad = __ballot_sync(0xffffffffu, bits >= 0x7f800000u);  // inf or NaN
  const unsigned nan = __ballot_sync(0xffffffffu, bits > 0x7f800000u);
  const float amax = warpMax(__uint_as_float(bits));
  int e = -120;  // blocks below 1e-36 (zero, subnormal) quantize to ~0 instead of overflowing 1 / s
  if (!bad && amax >= 1e-36f) {
    e = int((__float_as_uint(amax) >> 23) & 0xffu) - 126 - 7;  // amax = m 2^(e+7), m in [0.5, 1)
    if (amax > __fmul_rn(127.0f, pow2f(e))) e++;                 // now amax / 2^e <= 127
  }
  const float vs = __fmul_rn(v, pow2f(-e));
  const int a = bad ? 0 : __float2int_rn(vs);
  const int b = bad ? 0 : min(max(__float2int_rn(__fmul_rn(__fsub_rn(vs, float(a)), 256.0f)), -127), 127);
  row[col0 + lane] = u8(a);
  row[k + col0 + lane] = u8(b);
  // Integer sums: exact in any order.
  int s8 = a * 256 + b;
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) s8 += __shfl_xor_sync(0xffffffffu, s8, off);
  int s32 = s8;
#pragma unroll
  for (int off = 16; off >= 8; off >>= 1) s32 += __shfl_xor_sync(0xffffffffu, s32, off);
  float* s256 = reinterpret_cast<float*>(row + 2 * k);
  float* bsum = s256 + k / 32;
  int* sum8 = reinterpret_cast<int*>(bsum + k / 32);
  if ((lane & 7) == 0) sum8[col0 / 8 + (lane >> 3)] = s8;
  if (lane == 0) {
    const float special = nan ? __int_as_float(0x7fc00000) : amax;  // amax is inf when a lane is
    const float scale = __fmul_rn(pow2f(e), 1.0f / 256.0f);          // exact, also below 2^-126
    s256[col0 / 32] = bad ? special : scale;
    bsum[col0 / 32] = bad ? special : __fmul_rn(scale, float(s32));  // |sum| < 2^21: exact
  }
}

// Grid (ceil(K / 256), tokens), 256 threads: a warp per 32-column block, a lane per column.
extern "C" __global__ void __launch_bounds__(256) quantize_x(const float* __restrict__ x, int k, u8* __restrict__ xq,
                                                             u64 xqStride) {
  awaitPreviousKernel();
  const int block = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (block * 32 >= k) return;
  const int t = blockIdx.y;
  quantizeBlock32(x[i64(t) * k + block * 32 + (threadIdx.x & 31)], xq + u64(t) * xqStride, k, block * 32);
}
