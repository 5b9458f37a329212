// x *= s, elementwise.
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform Params {
  uint64_t x;
  float s;
  uint n;
  uint stride;  // invocations in the whole grid
} p;

void main() {
  F32Buf x = F32Buf(p.x);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += p.stride) x.v[i] = x.v[i] * p.s;
}
