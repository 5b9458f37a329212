// Decodes 32 consecutive elements ("chunk" c: elements 32c .. 32c+31) of one weight row, with
// the float operations of kernels/quant/dequantize.cc, so a decoded value is bit-identical to
// the CPU's. `precise` keeps the compiler from fusing q*d + m into an FMA (which would round
// once instead of twice). Every type's blocks hold a whole number of chunks, and K-quant
// sub-blocks of 32 (16 for q6_K scales) never straddle one, so chunk c needs one block only.
//
// Needs: TYPE_F32 | TYPE_F16 | TYPE_BF16 | TYPE_Q4_0 | TYPE_Q4_1 | TYPE_Q5_0 | TYPE_Q5_1 |
// TYPE_Q8_0 | TYPE_Q4_K | TYPE_Q5_K | TYPE_Q6_K, and K (elements per row). For the float types
// the last chunk may be short (K % 32 != 0): CHUNK_LEN(c) gives its length.

#define NCHUNK ((K + 31) / 32)
#define CHUNK_LEN(c) ((c) == NCHUNK - 1 ? (K - 32 * (NCHUNK - 1)) : 32)

uint wordAt(uint64_t base, uint i) { return uint(U16Buf(base).v[i]); }
uint byteAt(uint64_t base, uint o) {
  const uint w = wordAt(base, o >> 1);
  return (o & 1u) != 0u ? (w >> 8) : (w & 0xFFu);
}
int sbyteAt(uint64_t base, uint o) { return bitfieldExtract(int(byteAt(base, o)), 0, 8); }

void dequantChunk(uint64_t row, uint c, out float w[32]) {
#if defined(TYPE_F32)
  F32Buf p = F32Buf(row + uint64_t(c) * 128u);
  const uint n = CHUNK_LEN(c);
  for (uint j = 0u; j < 32u; j++) w[j] = j < n ? p.v[j] : 0.0;
#elif defined(TYPE_F16) || defined(TYPE_BF16)
  U16Buf p = U16Buf(row + uint64_t(c) * 64u);
  const uint n = CHUNK_LEN(c);
  for (uint j = 0u; j < 32u; j++) {
    const uint h = j < n ? uint(p.v[j]) : 0u;
#if defined(TYPE_F16)
    w[j] = h2f(h);
#else
    w[j] = uintBitsToFloat(h << 16);
#endif
  }
#elif defined(TYPE_Q4_0)
  const uint64_t b = row + uint64_t(c) * 18u;
  const float d = h2f(wordAt(b, 0u));
  for (uint k = 0u; k < 8u; k++) {
    const uint v = wordAt(b, 1u + k);
    w[2u * k] = float(int(v & 15u) - 8) * d;
    w[2u * k + 1u] = float(int((v >> 8) & 15u) - 8) * d;
    w[2u * k + 16u] = float(int((v >> 4) & 15u) - 8) * d;
    w[2u * k + 17u] = float(int(v >> 12) - 8) * d;
  }
#elif defined(TYPE_Q4_1)
  const uint64_t b = row + uint64_t(c) * 20u;
  const float d = h2f(wordAt(b, 0u));
  const float m = h2f(wordAt(b, 1u));
  for (uint k = 0u; k < 8u; k++) {
    const uint v = wordAt(b, 2u + k);
    precise float x0 = float(v & 15u) * d + m;
    precise float x1 = float((v >> 8) & 15u) * d + m;
    precise float x2 = float((v >> 4) & 15u) * d + m;
    precise float x3 = float(v >> 12) * d + m;
    w[2u * k] = x0;
    w[2u * k + 1u] = x1;
    w[2u * k + 16u] = x2;
    w[2u * k + 17u] = x3;
  }
#elif defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
#if defined(TYPE_Q5_0)
  const uint64_t b = row + uint64_t(c) * 22u;
  const uint qhWord = 1u, qsWord = 3u;
#else
  const uint64_t b = row + uint64_t(c) * 24u;
  const uint qhWord = 2u, qsWord = 4u;
  const float m = h2f(wordAt(b, 1u));
#endif
  const float d = h2f(wordAt(b, 0u));
  const uint qh = wordAt(b, qhWord) | (wordAt(b, qhWord + 1u) << 16);
  for (uint k = 0u; k < 8u; k++) {
    const uint v = wordAt(b, qsWord + k);
    const uint j0 = 2u * k, j1 = 2u * k + 1u;
    const uint q0 = (v & 15u) | (((qh >> j0) & 1u) << 4);
    const uint q1 = ((v >> 8) & 15u) | (((qh >> j1) & 1u) << 4);
    const uint q2 = ((v >> 4) & 15u) | (((qh >> (j0 + 16u)) & 1u) << 4);
    const uint q3 = (v >> 12) | (((qh >> (j1 + 16u)) & 1u) << 4);
#if defined(TYPE_Q5_0)
    w[j0] = float(int(q0) - 16) * d;
    w[j1] = float(int(q1) - 16) * d;
    w[j0 + 16u] = float(int(q2) - 16) * d;
    w[j1 + 16u] = float(int(q3) - 16) * d;
#else
    precise float x0 = float(q0) * d + m;
    precise float x1 = float(q1) * d + m;
    precise float x2 = float(q2) * d + m;
    precise float x3 = float(q3) * d + m;
    w[j0] = x0;
    w[j1] = x1;
    w[j0 + 16u] = x2;
    w[j1 + 16u] = x3;
#endif
  }
#elif defined(TYPE_Q8_0)
  const uint64_t b = row + uint64_t(c) * 34u;
  const float d = h2f(wordAt(b, 0u));
  for (uint k = 0u; k < 16u; k++) {
    const uint v = wordAt(b, 1u + k);
    w[2u * k] = float(bitfieldExtract(int(v), 0, 8)) * d;
    w[2u * k + 1u] = float(bitfieldExtract(int(v), 8, 8)) * d;
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint64_t b = row + uint64_t(c >> 3) * 144u;
  const uint qsByte = 16u;
#else
  const uint64_t b = row + uint64_t(c >> 3) * 176u;
  const uint qsByte = 48u;
#endif
  const uint s = c & 7u;  // sub-block
  const uint pair = s >> 1;
  const float d = h2f(wordAt(b, 0u));
  const float dmin = h2f(wordAt(b, 1u));
  uint sc, mn;
  if (s < 4u) {
    sc = byteAt(b, 4u + s) & 63u;
    mn = byteAt(b, 8u + s) & 63u;
  } else {
    sc = (byteAt(b, 8u + s) & 15u) | ((byteAt(b, s) >> 6) << 4);
    mn = (byteAt(b, 8u + s) >> 4) | ((byteAt(b, 4u + s) >> 6) << 4);
  }
  precise float d1 = d * float(sc);
  precise float m1 = dmin * float(mn);
  const uint shift = (s & 1u) * 4u;
  for (uint k = 0u; k < 16u; k++) {
    const uint v = wordAt(b, (qsByte >> 1) + 16u * pair + k);
    uint q0 = ((v & 0xFFu) >> shift) & 15u;
    uint q1 = ((v >> 8) >> shift) & 15u;
#if defined(TYPE_Q5_K)
    const uint h = wordAt(b, 8u + k);  // qh bytes 2k, 2k+1
    q0 += ((h >> s) & 1u) << 4;
    q1 += ((h >> (8u + s)) & 1u) << 4;
#endif
    precise float x0 = d1 * float(q0) - m1;
    precise float x1 = d1 * float(q1) - m1;
    w[2u * k] = x0;
    w[2u * k + 1u] = x1;
  }
#elif defined(TYPE_Q6_K)
  const uint64_t b = row + uint64_t(c >> 3) * 210u;
  const uint cc = c & 7u;
  const uint half_ = cc >> 2, qq = cc & 3u;
  const float d = h2f(wordAt(b, 104u));
  const uint qlByte = 64u * half_ + (qq & 1u) * 32u;
  const uint qhByte = 128u + 32u * half_;
  const uint nibShift = qq >= 2u ? 4u : 0u;
  const uint hShift = 2u * qq;
  const float s0 = d * float(sbyteAt(b, 192u + 8u * half_ + 2u * qq));
  const float s1 = d * float(sbyteAt(b, 192u + 8u * half_ + 2u * qq + 1u));
  for (uint k = 0u; k < 16u; k++) {
    const uint l = 2u * k;
    const uint ql = wordAt(b, (qlByte >> 1) + k);
    const uint qh = wordAt(b, (qhByte >> 1) + k);
    const int q0 = int((((ql & 0xFFu) >> nibShift) & 15u) | ((((qh & 0xFFu) >> hShift) & 3u) << 4)) - 32;
    const int q1 = int((((ql >> 8) >> nibShift) & 15u) | ((((qh >> 8) >> hShift) & 3u) << 4)) - 32;
    const float sc = l < 16u ? s0 : s1;
    w[l] = sc * float(q0);
    w[l + 1u] = sc * float(q1);
  }
#else
#error "dequant.glsl: no TYPE_ defined"
#endif
}
