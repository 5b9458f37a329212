// out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * weight, one workgroup of WG per row.
// The sum of squares is taken in double where the device has it (as the CPU does), in a fixed
// tree over WG strided partials; the scale is then rounded to float and applied as the CPU does:
// (x * scale) * weight. Defines: DIM, WG, HAVE_FP64 (optional).
#include "common.glsl"

layout(local_size_x = WG) in;

layout(push_constant) uniform Params {
  uint64_t x;
  uint64_t weight;
  uint64_t out_;
  float eps;
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
}
