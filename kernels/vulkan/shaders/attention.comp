// Attention of one query head over its session's paged KV cache: a workgroup per (head, token).
//
// Positions are taken in chunks of WG (one score per invocation), with an online softmax: the
// running maximum M and sum S are rescaled when a chunk raises M, and every invocation keeps the
// output dims d = lid, lid + WG, ... . All sums run in a fixed order (scores: sequential FMAs over
// the head dim; chunk sums: a fixed tree; V: sequential over positions), so results depend only
// on WG, which the host fixes (not per device).
// Defines: HD, HEADS, KVH, PAGE_TOKENS, KV_F16 (0/1), WG.
#include "common.glsl"

layout(local_size_x = WG) in;

layout(push_constant) uniform Params {
  uint64_t q;
  uint64_t out_;
  uint64_t info;    // per token: uvec2(position, first index into pages)
  uint64_t pages;   // page addresses
  float scale;
} p;

#define DPT ((HD + WG - 1) / WG)
#define GROUP (HEADS / KVH)
#define ROW (KVH * HD)  // elements of one token's K (or V)

shared float qs[HD];
shared float pr[WG];
shared float red[WG];
shared uint64_t pg[WG];

float kvAt(uint64_t page, uint index) {
#if KV_F16
  return h2f(uint(U16Buf(page).v[index]));
#else
  return F32Buf(page).v[index];
#endif
}

void main() {
  const uint t = gl_WorkGroupID.y;
  const uint th = t * HEADS + gl_WorkGroupID.x;  // token * HEADS + head
  const uint kvh = gl_WorkGroupID.x / GROUP;
  const uint lid = gl_LocalInvocationID.x;
  U32Buf info = U32Buf(p.info + uint64_t(t) * 8u);
  const uint n = info.v[0] + 1u;
  const uint first = info.v[1];
  U64Buf pages = U64Buf(p.pages);

  F32Buf q = F32Buf(p.q + uint64_t(th) * HD * 4u);
  for (uint d = lid; d < HD; d += WG) qs[d] = q.v[d];
  barrier();

  float acc[DPT];
  for (uint i = 0u; i < DPT; i++) acc[i] = 0.0;
  float M = 0.0, S = 0.0;
  bool started = false;
  for (uint j0 = 0u; j0 < n; j0 += WG) {
    const uint j = j0 + lid;
    float s = 0.0;
    if (j < n) {
      const uint64_t page = pages.v[first + j / PAGE_TOKENS];
      pg[lid] = page;
      const uint base = (j % PAGE_TOKENS) * ROW + kvh * HD;
      for (uint d = 0u; d < HD; d++) s = fma(qs[d], kvAt(page, base + d), s);
      s *= p.scale;
    }
    red[lid] = j < n ? s : -3.402823466e38;
    barrier();
    for (uint h = WG / 2u; h > 0u; h >>= 1) {
      if (lid < h) red[lid] = max(red[lid], red[lid + h]);
      barrier();
    }
    const float newM = started ? max(M, red[0]) : red[0];
    barrier();
    const float e = j < n ? exp(s - newM) : 0.0;
    pr[lid] = e;
    red[lid] = e;
    barrier();
    for (uint h = WG / 2u; h > 0u; h >>= 1) {
      if (lid < h) red[lid] += red[lid + h];
      barrier();
    }
    const float factor = started ? exp(M - newM) : 0.0;
    S = S * factor + red[0];
    const uint m = min(uint(WG), n - j0);
    for (uint i = 0u; i < DPT; i++) {
      const uint d = lid + i * WG;
      if (d < HD) {
        float a = acc[i] * factor;
        for (uint jj = 0u; jj < m; jj++) {
          const uint pos = j0 + jj;
          a = fma(pr[jj], kvAt(pg[jj], (PAGE_TOKENS + pos % PAGE_TOKENS) * ROW + kvh * HD + d), a);
        }
        acc[i] = a;
      }
    }
    M = newM;
    started = true;
    barrier();
  }
  const float inv = 1.0 / S;
  F32Buf o = F32Buf(p.out_ + uint64_t(th) * HD * 4u);
  for (uint i = 0u; i < DPT; i++) {
    const uint d = lid + i * WG;
    if (d < HD) o.v[d] = acc[i] * inv;
  }
}
