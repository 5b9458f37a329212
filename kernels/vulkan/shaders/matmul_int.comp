// y[t][r] = sum_k w[r][k] x[t][k] (+ bias[r]) for q4_K and q6_K weights on integer dot products,
// against activations in quantize_x.comp's integer form. The design of the CUDA backend's
// matmul_int.cuh (docs/cuda.md): a weight costs about one integer operation instead of the ~15
// float ones of decoding it exactly (matmul.comp), and the float work is a few operations per
// 16-64 weights.
//
// Order: a row is cut into units (q4_K: 64 elements, 32 quant bytes and their two sub-blocks;
// q6_K: 32 elements, 8 bytes of each of its three arrays). Lane l (of LANES = 32) takes units
// l, l + 32, ..., adding each unit's terms to its accumulator in a fixed sequence; the lanes are
// then added in a fixed tree. Integer sums are exact in any order. Rows per workgroup (WR x NR)
// and tokens (TT) do not change that order: a token's result is the same bits alone or in a batch.
//
// Defines: TYPE_Q4_K | TYPE_Q6_K, K (a multiple of 256), LANES, WR, NR, TT; HAVE_DOT4 where the
// device has VK_KHR_shader_integer_dot_product (else the dot products are spelt out).
#include "common.glsl"

#ifdef HAVE_DOT4
#extension GL_EXT_spirv_intrinsics : require
// OpSDotKHR on two 32-bit words of four signed bytes (PackedVectorFormat4x8Bit = 0).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int packedVectorFormat);
int dot4(uint a, uint b, int c) { return c + sdot4(a, b, 0); }
#else
int dot4(uint a, uint b, int c) {
  for (int i = 0; i < 32; i += 8) c += bitfieldExtract(int(a), i, 8) * bitfieldExtract(int(b), i, 8);
  return c;
}
#endif

layout(local_size_x = LANES, local_size_y = WR) in;

layout(push_constant) uniform Params {
  uint64_t w;
  uint64_t xq;
  uint64_t y;
  uint64_t bias;  // 0: none
  uint rows;
  uint tokens;
  uint rowStride;  // bytes
  uint xqStride;   // bytes per token row of xq
} p;

#define XQ_B K
#define XQ_S256 (2u * K)
#define XQ_BSUM (2u * K + K / 8u)
#define XQ_SUM8 (2u * K + K / 4u)

#if defined(TYPE_Q4_K)
#define UNIT 64u
// Unit u: sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles) of block u / 4, p = u % 4.
struct Unit {
  uint lo[8], hi[8];
  float d1[2], m1[2];
};
struct X {
  uint a[16], b[16];
  float s256[2], bsum[2];
};
// The 6-bit scale and min of sub-block s (kernels/quant/dequantize.cc's get_scale_min_k4).
void scaleMin(const uint sw[3], uint s, out uint sc, out uint mn) {
  if (s < 4u) {
    sc = ((sw[s >> 2] >> (8u * (s & 3u))) & 0xFFu) & 63u;
    mn = ((sw[(s + 4u) >> 2] >> (8u * ((s + 4u) & 3u))) & 0xFFu) & 63u;
  } else {
    const uint q = (sw[(s + 4u) >> 2] >> (8u * ((s + 4u) & 3u))) & 0xFFu;
    const uint lowS = (sw[(s - 4u) >> 2] >> (8u * ((s - 4u) & 3u))) & 0xFFu;
    const uint lowM = (sw[s >> 2] >> (8u * (s & 3u))) & 0xFFu;
    sc = (q & 0xFu) | ((lowS >> 6) << 4);
    mn = (q >> 4) | ((lowM >> 6) << 4);
  }
}
void loadUnit(uint64_t row, uint u, out Unit w) {
  const uint64_t b = row + uint64_t(u >> 2) * 144u;
  const uint pair = u & 3u;
  U32Buf head = U32Buf(b);
  const uint h0 = head.v[0];
  const uint sw[3] = uint[3](head.v[1], head.v[2], head.v[3]);
  U32Buf q = U32Buf(b + 16u + 32u * pair);
  for (uint i = 0u; i < 8u; i++) {
    const uint word = q.v[i];
    w.lo[i] = word & 0x0F0F0F0Fu;
    w.hi[i] = (word >> 4) & 0x0F0F0F0Fu;
  }
  const float d = h2f(h0 & 0xFFFFu), dmin = h2f(h0 >> 16);
  for (uint i = 0u; i < 2u; i++) {
    uint sc, mn;
    scaleMin(sw, 2u * pair + i, sc, mn);
    precise float d1 = d * float(sc);
    precise float m1 = dmin * float(mn);
    w.d1[i] = d1;
    w.m1[i] = m1;
  }
}
void loadX(uint64_t xr, uint u, out X x) {
  U32Buf a = U32Buf(xr + 64u * u);
  U32Buf b = U32Buf(xr + XQ_B + 64u * u);
  for (uint i = 0u; i < 16u; i++) {
    x.a[i] = a.v[i];
    x.b[i] = b.v[i];
  }
  F32Buf s = F32Buf(xr + XQ_S256);
  F32Buf m = F32Buf(xr + XQ_BSUM);
  x.s256[0] = s.v[2u * u];
  x.s256[1] = s.v[2u * u + 1u];
  x.bsum[0] = m.v[2u * u];
  x.bsum[1] = m.v[2u * u + 1u];
}
float dotUnit(Unit w, X x, float acc) {
  int la0 = 0, lb0 = 0, la1 = 0, lb1 = 0;
  for (uint i = 0u; i < 8u; i++) {
    la0 = dot4(w.lo[i], x.a[i], la0);
    lb0 = dot4(w.lo[i], x.b[i], lb0);
    la1 = dot4(w.hi[i], x.a[8u + i], la1);
    lb1 = dot4(w.hi[i], x.b[8u + i], lb1);
  }
  // |256 la + lb| <= 32 * 15 * 32639 < 2^24: converts exactly.
  precise float c0 = w.d1[0] * x.s256[0];
  precise float c1 = w.d1[1] * x.s256[1];
  acc = fma(c0, float(la0 * 256 + lb0), acc);
  acc = fma(-w.m1[0], x.bsum[0], acc);
  acc = fma(c1, float(la1 * 256 + lb1), acc);
  acc = fma(-w.m1[1], x.bsum[1], acc);
  return acc;
}
#elif defined(TYPE_Q6_K)
#define UNIT 32u
// Unit u (block u / 8, half h = u / 4 % 2, j = u % 4): elements 128h + 32qt + 8j .. +7 of the
// block for qt = 0..3, quants 0..63 in bytes, and d * scale of each quarter's 16-element group.
struct Unit {
  uint q[4][2];
  float ds[4];
};
struct X {
  uint a[4][2], b[4][2];
  int sum8[4];
  float s256[4];
};
uint firstElement(uint u) { return (u >> 3) * 256u + ((u >> 2) & 1u) * 128u + (u & 3u) * 8u; }
// 8 bytes at a 2-byte aligned address, from three aligned words (up to 4 bytes past the 8, which
// the callers keep inside the 210-byte block).
void load8(uint64_t address, out uint w0, out uint w1) {
  U32Buf w = U32Buf(address & ~uint64_t(3));
  const uint a = w.v[0], b = w.v[1], c = w.v[2];
  const bool shifted = (address & 2ul) != 0ul;
  w0 = shifted ? (a >> 16) | (b << 16) : a;
  w1 = shifted ? (b >> 16) | (c << 16) : b;
}
int sbyte(uint64_t address) {
  const uint word = uint(U16Buf(address & ~uint64_t(1)).v[0]);
  return bitfieldExtract(int(word), (address & 1ul) != 0ul ? 8 : 0, 8);
}
void loadUnit(uint64_t row, uint u, out Unit w) {
  const uint64_t b = row + uint64_t(u >> 3) * 210u;
  const uint h = (u >> 2) & 1u, j = u & 3u;
  uint ql0[2], ql1[2], qh[2];
  load8(b + 64u * h + 8u * j, ql0[0], ql0[1]);
  load8(b + 64u * h + 32u + 8u * j, ql1[0], ql1[1]);
  load8(b + 128u + 32u * h + 8u * j, qh[0], qh[1]);
  for (uint i = 0u; i < 2u; i++) {
    w.q[0][i] = (ql0[i] & 0x0F0F0F0Fu) | ((qh[i] << 4) & 0x30303030u);
    w.q[1][i] = (ql1[i] & 0x0F0F0F0Fu) | ((qh[i] << 2) & 0x30303030u);
    w.q[2][i] = ((ql0[i] >> 4) & 0x0F0F0F0Fu) | (qh[i] & 0x30303030u);
    w.q[3][i] = ((ql1[i] >> 4) & 0x0F0F0F0Fu) | ((qh[i] >> 2) & 0x30303030u);
  }
  const float d = h2f(uint(U16Buf(b + 208u).v[0]));
  for (uint qt = 0u; qt < 4u; qt++) {
    precise float ds = d * float(sbyte(b + 192u + 8u * h + 2u * qt + (j >> 1)));
    w.ds[qt] = ds;
  }
}
void loadX(uint64_t xr, uint u, out X x) {
  const uint e = firstElement(u);
  for (uint qt = 0u; qt < 4u; qt++) {
    U32Buf a = U32Buf(xr + e + 32u * qt);
    U32Buf b = U32Buf(xr + XQ_B + e + 32u * qt);
    x.a[qt][0] = a.v[0];
    x.a[qt][1] = a.v[1];
    x.b[qt][0] = b.v[0];
    x.b[qt][1] = b.v[1];
    x.sum8[qt] = I32Buf(xr + XQ_SUM8).v[(e + 32u * qt) / 8u];
    x.s256[qt] = F32Buf(xr + XQ_S256).v[(e + 32u * qt) / 32u];
  }
}
float dotUnit(Unit w, X x, float acc) {
  for (uint qt = 0u; qt < 4u; qt++) {
    int la = dot4(w.q[qt][1], x.a[qt][1], dot4(w.q[qt][0], x.a[qt][0], 0));
    int lb = dot4(w.q[qt][1], x.b[qt][1], dot4(w.q[qt][0], x.b[qt][0], 0));
    // The quants' offset of 32: sum (q - 32)(256a + b) = 256 la + lb - 32 sum8 (exact).
    const int l = la * 256 + lb - 32 * x.sum8[qt];
    precise float c = w.ds[qt] * x.s256[qt];
    acc = fma(c, float(l), acc);
  }
  return acc;
}
#else
#error "matmul_int.comp: TYPE_Q4_K or TYPE_Q6_K"
#endif

#define NUNITS (K / UNIT)

#include "lane_sums.glsl"

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint wr = gl_LocalInvocationID.y;
  const uint row0 = (gl_WorkGroupID.x * WR + wr) * NR;
  const uint t0 = gl_WorkGroupID.y * TT;

  float acc[NR][TT];
  for (uint r = 0u; r < NR; r++)
    for (uint t = 0u; t < TT; t++) acc[r][t] = 0.0;

  for (uint u = lane; u < NUNITS; u += LANES) {
    Unit wu[NR];
    for (uint r = 0u; r < NR; r++) {
      const uint row = min(row0 + r, p.rows - 1u);  // rows past the end compute garbage, never stored
      loadUnit(p.w + uint64_t(row) * p.rowStride, u, wu[r]);
    }
    for (uint t = 0u; t < TT; t++) {
      const uint tok = min(t0 + t, p.tokens - 1u);
      X x;
      loadX(p.xq + uint64_t(tok) * p.xqStride, u, x);
      for (uint r = 0u; r < NR; r++) acc[r][t] = dotUnit(wu[r], x, acc[r][t]);
    }
  }

  storeLaneSums(acc, lane, wr, row0, t0);
}
