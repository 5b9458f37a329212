// Activations to the integer form matmul_int.comp reads (quantize.glsl). One invocation per
// 32-column block; each token row alone, so a token quantizes the same way in any batch.
#include "common.glsl"
#include "quantize.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Params {
  uint64_t x;
  uint64_t xq;
  uint k;
  uint xqStride;
} p;

void main() {
  const uint block = gl_GlobalInvocationID.x;
  const uint t = gl_WorkGroupID.y;
  if (block * 32u >= p.k) return;
  F32Buf xr = F32Buf(p.x + (uint64_t(t) * p.k + block * 32u) * 4u);
  float v[32];
  for (uint j = 0u; j < 32u; j++) v[j] = xr.v[j];
  quantizeBlock(v, p.xq + uint64_t(t) * p.xqStride, block, p.k);
}
