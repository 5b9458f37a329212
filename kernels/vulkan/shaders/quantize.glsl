// The integer form of activations that matmul_int.comp reads: ~15 bits per element, the scheme of
// the CPU's VNNI kernels and of the CUDA backend (docs/cpu-kernels.md,
// kernels/cuda/kernels/quantize_x.cuh), written by quantize_x.comp and, fused, by the kernels
// that produce a product's input (rms_norm.comp).
//
// Per token row and per block of 32 columns: s = a power of two with max|x| / s <= 127,
// a = round(x / s), b = round(256 (x / s - a)) clamped to +-127 (round half to even), so
// x ~= s (a + b / 256) within s / 512. Row layout (2.75 K bytes, K a multiple of 32):
//   a[K] int8 | b[K] int8 | s256[K/32] float: s / 256 | bsum[K/32] float: s / 256 * sum(256a + b)
//   | sum8[K/8] int: sum of (256 a + b) over each 8 columns
// A block holding inf or NaN gets that value as s256 and bsum, so it reaches every result.
// Integer sums are exact; the float steps are exact but for the two roundings, so every kernel
// that calls quantizeBlock on the same 32 values writes the same bytes.

// 2^e for e in [-126, 127], exactly.
float pow2(int e) { return uintBitsToFloat(uint(e + 127) << 23); }

// Block `block` (columns 32 block .. +31) of the token row at `row` (K columns) from its values v.
void quantizeBlock(const float v[32], uint64_t row, uint block, uint k) {
  float amax = 0.0;
  bool bad = false, nan = false;
  for (uint j = 0u; j < 32u; j++) {
    const uint bits = floatBitsToUint(v[j]) & 0x7FFFFFFFu;
    bad = bad || bits >= 0x7F800000u;
    nan = nan || bits > 0x7F800000u;
    amax = max(amax, uintBitsToFloat(bits));
  }
  int e = -120;  // blocks below 1e-36 (zero, subnormal) quantize to ~0 instead of overflowing 1 / s
  if (!bad && amax >= 1e-36) {
    e = int((floatBitsToUint(amax) >> 23) & 0xFFu) - 126 - 7;  // amax = m 2^(e+7), m in [0.5, 1)
    precise float limit = 127.0 * pow2(e);
    if (amax > limit) e++;  // now amax / 2^e <= 127
  }
  const float inv = pow2(-e);
  U32Buf aOut = U32Buf(row + block * 32u);
  U32Buf bOut = U32Buf(row + k + block * 32u);
  I32Buf sum8 = I32Buf(row + 2u * k + k / 4u);
  int total = 0;
  for (uint g = 0u; g < 4u; g++) {  // 8 columns at a time: two words of a, two of b, one sum
    int s8 = 0;
    for (uint h = 0u; h < 2u; h++) {
      uint pa = 0u, pb = 0u;
      for (uint i = 0u; i < 4u; i++) {
        const uint j = 8u * g + 4u * h + i;
        precise float vs = v[j] * inv;
        const int a = bad ? 0 : int(roundEven(vs));
        precise float rest = (vs - float(a)) * 256.0;
        const int b = bad ? 0 : clamp(int(roundEven(rest)), -127, 127);
        pa |= (uint(a) & 0xFFu) << (8u * i);
        pb |= (uint(b) & 0xFFu) << (8u * i);
        s8 += a * 256 + b;
      }
      aOut.v[2u * g + h] = pa;
      bOut.v[2u * g + h] = pb;
    }
    sum8.v[block * 4u + g] = s8;
    total += s8;
  }
  F32Buf s256 = F32Buf(row + 2u * k);
  F32Buf bsum = F32Buf(row + 2u * k + k / 8u);
  const float special = nan ? uintBitsToFloat(0x7FC00000u) : amax;  // amax is inf when a value is
  precise float scale = pow2(e) * (1.0 / 256.0);
  precise float represented = scale * float(total);  // |total| < 2^21: exact
  s256.v[block] = bad ? special : scale;
  bsum.v[block] = bad ? special : represented;
}
