// GEGLU with GELU's tanh form (gemma): out = g / (1 + exp(-z)) * up, elementwise, with
// z = sqrt(8 / pi) (g + 0.044715 g^3) written as g (c + c 0.044715 g^2) - the CPU's constants
// (kernels/cpu/activation.cc, rounded to float there; given here by their bits, so that no
// compiler folds them at another precision) and its vector kernels' operations, one fma for the
// bracket - so only exp differs from the CPU. out may alias gate.
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
  const float scale = uintBitsToFloat(0x3fcc422au);  // 1.59576917: sqrt(8 / pi)
  const float cubic = uintBitsToFloat(0x3d922279u);  // 0.0713548139: 0.044715 sqrt(8 / pi)
  F32Buf g = F32Buf(p.gate), u = F32Buf(p.up), o = F32Buf(p.out_);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += p.stride) {
    const float x = g.v[i];
    precise float z = x * fma(cubic, x * x, scale);
    precise float y = x / (1.0 + exp(-z)) * u.v[i];
    o.v[i] = y;
  }
}
