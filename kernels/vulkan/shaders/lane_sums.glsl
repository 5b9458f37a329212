// The end of matmul.comp and matmul_int.comp: each row group's LANES invocations hold partial
// sums acc[NR][TT] that are added in one fixed tree - level s (LANES / 2, ..., 1) adds lane l + s
// into lane l < s - and lane 0 stores the results (+ bias). Needs p.y, p.rows, p.tokens, p.bias.
//
// Levels narrower than the subgroup run in registers as xor shuffles, without shared memory or
// barriers: for l < s, l ^ s = l + s, and float addition commutes, so lane l gets exactly the
// tree's sum (and its partner the same bits). So the bits do not depend on the subgroup width,
// on HAVE_SUBGROUP_SHUFFLE, or on whether the device has subgroups at all: lavapipe's 8-wide
// subgroups run the wider levels in shared memory and test the same code NVIDIA's 32 run alone.
// Assumes invocations fill subgroups in order of gl_LocalInvocationIndex, as every driver does.
#ifdef HAVE_SUBGROUP_SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

shared float red[WR][NR * TT][LANES];

void storeLaneSums(float acc[NR][TT], uint lane, uint wr, uint row0, uint t0) {
#ifdef HAVE_SUBGROUP_SHUFFLE
  const uint inRegisters = min(gl_SubgroupSize, LANES);
#else
  const uint inRegisters = 1u;
#endif
  if (inRegisters < LANES) {
    for (uint r = 0u; r < NR; r++)
      for (uint t = 0u; t < TT; t++) red[wr][r * TT + t][lane] = acc[r][t];
    barrier();
    for (uint s = LANES / 2u; s >= inRegisters; s >>= 1) {
      if (lane < s) {
        for (uint i = 0u; i < NR * TT; i++) red[wr][i][lane] += red[wr][i][lane + s];
      }
      barrier();
    }
    for (uint r = 0u; r < NR; r++)
      for (uint t = 0u; t < TT; t++) acc[r][t] = red[wr][r * TT + t][lane];
  }
#ifdef HAVE_SUBGROUP_SHUFFLE
  for (uint s = inRegisters / 2u; s > 0u; s >>= 1) {
    for (uint r = 0u; r < NR; r++)
      for (uint t = 0u; t < TT; t++) acc[r][t] += subgroupShuffleXor(acc[r][t], s);
  }
#endif
  if (lane != 0u) return;
  for (uint r = 0u; r < NR; r++) {
    for (uint t = 0u; t < TT; t++) {
      const uint row = row0 + r, tok = t0 + t;
      if (row < p.rows && tok < p.tokens) {
        float v = acc[r][t];
        if (p.bias != 0ul) v += F32Buf(p.bias).v[row];
        F32Buf(p.y + (uint64_t(tok) * p.rows + row) * 4u).v[0] = v;
      }
    }
  }
}
