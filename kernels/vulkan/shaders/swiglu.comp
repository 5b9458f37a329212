// out = gate / (1 + exp(-gate)) * up, elementwise (out may alias gate).
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Params {
  uint64_t gate;
  uint64_t up;
  uint64_t out_;
  uint n;
  uint stride;  // invocations in the whole grid
} p;

void main() {
  F32Buf g = F32Buf(p.gate), u = F32Buf(p.up), o = F32Buf(p.out_);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += p.stride) {
    const float x = g.v[i];
    precise float y = x / (1.0 + exp(-x)) * u.v[i];
    o.v[i] = y;
  }
}
