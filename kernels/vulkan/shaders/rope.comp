// Rotary embedding in place. cos/sin come from the host, computed in double exactly as the CPU
// device computes them (GLSL has no double transcendentals), so the rotation itself - two
// products and a sum per output, unfused - gives the CPU's bits.
// Defines: HD (head dim), HALF (rotary dims / 2), NEOX (0/1).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Params {
  uint64_t x;
  uint64_t table;  // vec2(cos, sin) per (token, i)
  uint tokens;
  uint heads;
} p;

void main() {
  const uint gid = gl_GlobalInvocationID.x;
  if (gid >= p.tokens * p.heads * HALF) return;
  const uint i = gid % HALF;
  const uint th = gid / HALF;  // token * heads + head
  const uint t = th / p.heads;
  const vec2 cs = Vec2Buf(p.table).v[t * HALF + i];
#if NEOX
  const uint a = i, b = i + HALF;
#else
  const uint a = 2u * i, b = 2u * i + 1u;
#endif
  F32Buf v = F32Buf(p.x + uint64_t(th) * HD * 4u);
  const float x0 = v.v[a], x1 = v.v[b];
  precise float y0 = x0 * cs.x - x1 * cs.y;
  precise float y1 = x0 * cs.y + x1 * cs.x;
  v.v[a] = y0;
  v.v[b] = y1;
}
