// out[i] = dequantized row ids[i] of a weight table (the token embedding lookup).
// One invocation per 32-element chunk of an output row; rows are validated on the host.
// Defines: TYPE_*, K.
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Params {
  uint64_t table;
  uint64_t ids;  // int32 per output row
  uint64_t out_;
  uint rowStride;
  uint n;
} p;

void main() {
  const uint c = gl_GlobalInvocationID.x;
  const uint i = gl_WorkGroupID.y;
  if (c >= NCHUNK || i >= p.n) return;
  const int id = I32Buf(p.ids).v[i];
  float wv[32];
  dequantChunk(p.table + uint64_t(id) * p.rowStride, c, wv);
  const uint n = CHUNK_LEN(c);
  F32Buf o = F32Buf(p.out_ + (uint64_t(i) * K + 32u * c) * 4u);
  for (uint j = 0u; j < 32u; j++) {
    if (j < n) o.v[j] = wv[j];
  }
}
