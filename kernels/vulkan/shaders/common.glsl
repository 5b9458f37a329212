// Shared by every jitllm kernel: buffer-reference types over device addresses, exact fp16
// conversions, and the conventions the host side relies on.
//
// Every buffer is reached through a 64-bit device address (VK_KHR_buffer_device_address, core in
// Vulkan 1.2): the Device interface's pointers *are* these addresses, so kernels take them in
// push constants and no descriptor sets exist. Shapes, types and workgroup sizes arrive as
// #defines prepended by the host (pipeline_library.cc), one pipeline per distinct set.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Buf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Buf { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Buf { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U64Buf { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec2Buf { vec2 v[]; };
// Quantized rows are only 2-byte aligned (blocks of 18, 22, 34, 210 bytes end to end).
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Buf { uint16_t v[]; };

// fp16 bits -> float, exactly (kernels/quant/half.h's fp16ToFp32): no reliance on the driver's
// conversion, which may flush fp16 subnormals.
float h2f(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1Fu;
  const uint m = h & 0x3FFu;
  if (e == 0u) return uintBitsToFloat(floatBitsToUint(float(m) * 5.9604644775390625e-8) | sign);
  if (e == 31u) return uintBitsToFloat(sign | 0x7F800000u | (m << 13));
  return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// float -> fp16 bits with round-to-nearest-even, exactly half.h's fp32ToFp16 (integer code, so
// every device rounds alike).
uint f2h(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u | ((a >> 13) & 0x3FFu);
  if (a >= 0x47800000u) return sign | 0x7C00u;
  if (a >= 0x38800000u) return sign | ((a + 0xFFFu + ((a >> 13) & 1u) - (112u << 23)) >> 13);
  if (a <= 0x33000000u) return sign;
  const uint e = a >> 23;
  const uint m = (a & 0x7FFFFFu) | 0x800000u;
  const uint shift = 126u - e;
  uint q = m >> shift;
  const uint rest = m & ((1u << shift) - 1u);
  const uint halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (q & 1u) != 0u)) q++;
  return sign | q;
}
