// Writes each token's K and V rows into its KV page slot (KvLayout: pageTokens tokens of K, then
// of V; each token's heads contiguous), as fp32 or as fp16 rounded to nearest even.
// Defines: WIDTH (kv heads x head dim), PAGE_TOKENS, KV_F16 (0/1).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Params {
  uint64_t k;
  uint64_t v;
  uint64_t slots;  // per token: uvec4(page address low, high, slot, 0)
  uint tokens;
} p;

void main() {
  const uint gid = gl_GlobalInvocationID.x;
  if (gid >= p.tokens * WIDTH) return;
  const uint e = gid % WIDTH;
  const uint t = gid / WIDTH;
  U32Buf s = U32Buf(p.slots + uint64_t(t) * 16u);
  const uint64_t page = uint64_t(s.v[0]) | (uint64_t(s.v[1]) << 32);
  const uint slot = s.v[2];
  const float kv = F32Buf(p.k).v[gid];
  const float vv = F32Buf(p.v).v[gid];
  const uint64_t kIndex = uint64_t(slot) * WIDTH + e;
  const uint64_t vIndex = uint64_t(PAGE_TOKENS + slot) * WIDTH + e;
#if KV_F16
  U16Buf(page + kIndex * 2u).v[0] = uint16_t(f2h(kv));
  U16Buf(page + vIndex * 2u).v[0] = uint16_t(f2h(vv));
#else
  F32Buf(page + kIndex * 4u).v[0] = kv;
  F32Buf(page + vIndex * 4u).v[0] = vv;
#endif
}
