// out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * weight, one workgroup of WG per row.
// The sum of squares is taken in double where the device has it (as the CPU does), in a fixed
// tree over WG strided partials; the scale is then rounded to float and applied as the CPU does:
// (x * scale) * weight. Defines: DIM, WG, HAVE_FP64 (optional); QUANTIZE (optional) also writes
// the output's integer form (quantize.glsl) at p.xq, one row per p.xqStride bytes, for the matrix
// products that read it - the same bytes quantize_x.comp would write from `out`.
#include "common.glsl"
#ifdef QUANTIZE
#include "quantize.glsl"
#endif

layout(local_size_x = WG) in;

layout(push_constant) uniform Params {
  uint64_t x;
  uint64_t weight;
  uint64_t out_;
  uint64_t xq;
  float eps;
  uint xqStride;
} p;

#ifdef HAVE_FP64
#define ACC double
#else
#define ACC float
#endif

shared ACC part[WG];

void main() {
  const uint r = gl_WorkGroupID.x;
  const uint lid = gl_LocalInvocationID.x;
  F32Buf xr = F32Buf(p.x + uint64_t(r) * DIM * 4u);
  ACC s = ACC(0);
  for (uint i = lid; i < DIM; i += WG) {
    const ACC v = ACC(xr.v[i]);
    s += v * v;
  }
  part[lid] = s;
  barrier();
  for (uint h = WG / 2u; h > 0u; h >>= 1) {
    if (lid < h) part[lid] += part[lid + h];
    barrier();
  }
  const float scale = float(ACC(1) / sqrt(part[0] / ACC(DIM) + ACC(p.eps)));
  F32Buf wt = F32Buf(p.weight);
  F32Buf o = F32Buf(p.out_ + uint64_t(r) * DIM * 4u);
  for (uint i = lid; i < DIM; i += WG) {
    precise float v = (xr.v[i] * scale) * wt.v[i];
    o.v[i] = v;
  }
#ifdef QUANTIZE
  // Each 32-column block from its own recomputed values (the same expression, so the same bits
  // as `out`), which needs no barrier on the output.
  for (uint block = lid; block < DIM / 32u; block += WG) {
    float v[32];
    for (uint j = 0u; j < 32u; j++) {
      const uint i = 32u * block + j;
      precise float y = (xr.v[i] * scale) * wt.v[i];
      v[j] = y;
    }
    quantizeBlock(v, p.xq + uint64_t(r) * p.xqStride, block, DIM);
  }
#endif
}
