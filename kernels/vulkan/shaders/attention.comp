// Attention of one query head over its session's paged KV cache.
//
// Positions are taken in chunks of WG (one score per invocation). Each chunk's softmax state -
// its maximum m, its sum s = sum exp(score - m) and its unnormalised output o = sum exp(score - m) v -
// starts afresh, and the chunks' states are folded together in order (fold()). Every sum runs in
// a fixed order (scores: sequential FMAs over the head dim; chunk max and sum: a fixed tree;
// o: sequential over the chunk's positions), so results depend only on WG, which the host fixes.
//
// A token at position P attends to positions start .. P, where start is 0 or, with a sliding
// window (p.window > 0, gemma3's local layers), max(0, P - window + 1). Chunks are counted from
// start, and start is added only to find a position's page and row: a window has the bits of a
// context holding just its positions (window 0 keeps its bits), and page-table entries of pages
// that end before start (freed, possibly null) are never read.
//
// MODE 0: a workgroup per (head, token) computes and folds all of that token's chunks.
// MODE 1: a workgroup per (head, token, chunk) writes that chunk's state to `partials`, and
// MODE 2: a workgroup per (head, token) folds them in order - the same operations as MODE 0, so
// the same bits. Decode (a handful of workgroups over a long context) uses 1 + 2.
// Defines: HD, HEADS, KVH, PAGE_TOKENS, KV_F16 (0/1), WG, MODE; QUANTIZE (optional, MODE 0 and 2,
// HD a multiple of 32) also writes the output's integer form (quantize.glsl) at p.xq, a token's
// row of HEADS x HD columns every p.xqStride bytes, for the output projection that reads it.
#include "common.glsl"
#ifdef QUANTIZE
#include "quantize.glsl"
#endif

layout(local_size_x = WG) in;

layout(push_constant) uniform Params {
  uint64_t q;
  uint64_t out_;
  uint64_t info;      // per token: uvec2(position, index of its table's first page in pages)
  uint64_t pages;     // page addresses
  uint64_t partials;  // MODE 1, 2: per (token, head, chunk) a state of HD + 2 floats
  uint64_t xq;        // QUANTIZE
  float scale;
  uint maxChunks;     // MODE 1, 2: chunks per (token, head) in `partials`
  uint xqStride;      // QUANTIZE
  uint window;        // the sliding window in positions; 0: none
} p;

#define DPT ((HD + WG - 1) / WG)
#define GROUP (HEADS / KVH)
#define ROW (KVH * HD)  // elements of one token's K (or V)
#define STATE (HD + 2)  // o[HD], m, s

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

// Folds a chunk's state (m, s, o) into the running total (the first chunk is taken as it is).
void fold(bool first, float m, float s, float o[DPT], inout float totM, inout float totS, inout float totO[DPT]) {
  if (first) {
    totM = m;
    totS = s;
    for (uint i = 0u; i < DPT; i++) totO[i] = o[i];
    return;
  }
  const float now = max(totM, m);
  const float a = exp(totM - now), b = exp(m - now);
  precise float sum = totS * a + s * b;
  totS = sum;
  for (uint i = 0u; i < DPT; i++) {
    precise float v = totO[i] * a + o[i] * b;
    totO[i] = v;
  }
  totM = now;
}

// Chunk c of token t (n positions from `start`; its page table at pages[table]) for head `head`:
// its max, sum and output dims lid + i WG.
void chunkState(uint t, uint head, uint n, uint start, uint table, uint c, out float m, out float s,
                out float o[DPT]) {
  const uint kvh = head / GROUP;
  const uint lid = gl_LocalInvocationID.x;
  U64Buf pages = U64Buf(p.pages);
  const uint j0 = c * WG;
  const uint j = j0 + lid;
  float score = 0.0;
  if (j < n) {
    const uint64_t page = pages.v[table + (start + j) / PAGE_TOKENS];
    pg[lid] = page;
    const uint base = ((start + j) % PAGE_TOKENS) * ROW + kvh * HD;
    for (uint d = 0u; d < HD; d++) score = fma(qs[d], kvAt(page, base + d), score);
    score *= p.scale;
  }
  red[lid] = j < n ? score : -3.402823466e38;
  barrier();
  for (uint h = WG / 2u; h > 0u; h >>= 1) {
    if (lid < h) red[lid] = max(red[lid], red[lid + h]);
    barrier();
  }
  m = red[0];
  barrier();
  const float e = j < n ? exp(score - m) : 0.0;
  pr[lid] = e;
  red[lid] = e;
  barrier();
  for (uint h = WG / 2u; h > 0u; h >>= 1) {
    if (lid < h) red[lid] += red[lid + h];
    barrier();
  }
  s = red[0];
  const uint count = min(uint(WG), n - j0);
  for (uint i = 0u; i < DPT; i++) {
    const uint d = lid + i * WG;
    float a = 0.0;
    if (d < HD) {
      for (uint jj = 0u; jj < count; jj++) {
        const uint pos = start + j0 + jj;
        a = fma(pr[jj], kvAt(pg[jj], (PAGE_TOKENS + pos % PAGE_TOKENS) * ROW + kvh * HD + d), a);
      }
    }
    o[i] = a;
  }
  barrier();  // pr, pg and red are free for the next chunk
}

#ifdef QUANTIZE
shared float outS[HD];
#endif

void writeOutput(uint t, uint head, float totS, float totO[DPT]) {
  const float inv = 1.0 / totS;
  F32Buf o = F32Buf(p.out_ + (uint64_t(t) * HEADS + head) * HD * 4u);
  for (uint i = 0u; i < DPT; i++) {
    const uint d = gl_LocalInvocationID.x + i * WG;
    if (d < HD) {
      precise float v = totO[i] * inv;
      o.v[d] = v;
#ifdef QUANTIZE
      outS[d] = v;
#endif
    }
  }
#ifdef QUANTIZE
  // The head's HD / 32 blocks of the token's row, from the values just written.
  barrier();
  for (uint b = gl_LocalInvocationID.x; b < HD / 32u; b += WG) {
    float v[32];
    for (uint j = 0u; j < 32u; j++) v[j] = outS[32u * b + j];
    quantizeBlock(v, p.xq + uint64_t(t) * p.xqStride, head * (HD / 32u) + b, HEADS * HD);
  }
#endif
}

void main() {
  const uint head = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint lid = gl_LocalInvocationID.x;
  U32Buf info = U32Buf(p.info + uint64_t(t) * 8u);
  const uint position = info.v[0];
  const uint start = p.window > 0u && position >= p.window ? position - p.window + 1u : 0u;
  const uint n = position + 1u - start;
  const uint table = info.v[1];
  const uint chunks = (n + WG - 1u) / WG;
#if MODE == 2
  F32Buf states = F32Buf(p.partials + (uint64_t(t) * HEADS + head) * p.maxChunks * STATE * 4u);
  float totM = 0.0, totS = 0.0, totO[DPT];
  for (uint c = 0u; c < chunks; c++) {
    const uint at = c * STATE;
    float o[DPT];
    for (uint i = 0u; i < DPT; i++) {
      const uint d = lid + i * WG;
      o[i] = d < HD ? states.v[at + d] : 0.0;
    }
    fold(c == 0u, states.v[at + HD], states.v[at + HD + 1u], o, totM, totS, totO);
  }
  writeOutput(t, head, totS, totO);
#else
  F32Buf q = F32Buf(p.q + (uint64_t(t) * HEADS + head) * HD * 4u);
  for (uint d = lid; d < HD; d += WG) qs[d] = q.v[d];
  barrier();
#if MODE == 1
  const uint c = gl_WorkGroupID.z;
  if (c >= chunks) return;  // the whole workgroup: no barrier is left waiting
  float m, s, o[DPT];
  chunkState(t, head, n, start, table, c, m, s, o);
  F32Buf state = F32Buf(p.partials + ((uint64_t(t) * HEADS + head) * p.maxChunks + c) * STATE * 4u);
  for (uint i = 0u; i < DPT; i++) {
    const uint d = lid + i * WG;
    if (d < HD) state.v[d] = o[i];
  }
  if (lid == 0u) {
    state.v[HD] = m;
    state.v[HD + 1u] = s;
  }
#else
  float totM = 0.0, totS = 0.0, totO[DPT];
  for (uint c = 0u; c < chunks; c++) {
    float m, s, o[DPT];
    chunkState(t, head, n, start, table, c, m, s, o);
    fold(c == 0u, m, s, o, totM, totS, totO);
  }
  writeOutput(t, head, totS, totO);
#endif
#endif
}
