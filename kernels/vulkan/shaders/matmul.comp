// y[t][r] = sum_k w[r][k] * x[t][k] (+ bias[r]), for any number of tokens, every weight type.
//
// The summation order of one output is fixed by LANES alone (a constant, 32): lane l adds, by
// sequential FMAs, the products of chunks l, l+LANES, l+2*LANES, ... (32 elements each, in
// order); the LANES partial sums are then added in a fixed tree. Rows per workgroup (WR x NR)
// and tokens per workgroup (TT) are tuning knobs that do not change that order, so a token's
// result is bit-identical whether it runs alone (decode) or in a batch (prefill), on every
// variant the tuner may pick, and on every run.
//
// Defines: TYPE_*, K, LANES, WR (row groups per workgroup), NR (rows per row group), TT.
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = LANES, local_size_y = WR) in;

layout(push_constant) uniform Params {
  uint64_t w;
  uint64_t x;
  uint64_t y;
  uint64_t bias;  // 0: none
  uint rows;
  uint tokens;
  uint rowStride;  // bytes
} p;

#include "lane_sums.glsl"

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint wr = gl_LocalInvocationID.y;
  const uint row0 = (gl_WorkGroupID.x * WR + wr) * NR;
  const uint t0 = gl_WorkGroupID.y * TT;

  float acc[NR][TT];
  for (uint r = 0u; r < NR; r++)
    for (uint t = 0u; t < TT; t++) acc[r][t] = 0.0;

  for (uint c = lane; c < NCHUNK; c += LANES) {
    float wv[NR][32];
    for (uint r = 0u; r < NR; r++) {
      const uint row = min(row0 + r, p.rows - 1u);  // rows past the end compute garbage, never stored
      dequantChunk(p.w + uint64_t(row) * p.rowStride, c, wv[r]);
    }
    const uint n = CHUNK_LEN(c);
    for (uint t = 0u; t < TT; t++) {
      const uint tok = min(t0 + t, p.tokens - 1u);
      F32Buf xr = F32Buf(p.x + (uint64_t(tok) * K + 32u * c) * 4u);
      float xv[32];
      for (uint j = 0u; j < 32u; j++) xv[j] = j < n ? xr.v[j] : 0.0;
      for (uint r = 0u; r < NR; r++) {
        float a = acc[r][t];
        for (uint j = 0u; j < 32u; j++) {
          if (j < n) a = fma(wv[r][j], xv[j], a);
        }
        acc[r][t] = a;
      }
    }
  }

  storeLaneSums(acc, lane, wr, row0, t0);
}
