// Decoding of GGUF weight rows, 8 elements at a time, bit-exact with kernels/quant/dequantize.cc
// (the same float operations in the same order: __fmul_rn and friends are never contracted).
//
// Specialised by:
//   JL_WTYPE  the GGUF type number (0 f32, 1 f16, 2 q4_0, 3 q4_1, 6 q5_0, 7 q5_1, 8 q8_0,
//             12 q4_K, 13 q5_K, 14 q6_K, 30 bf16)
//   JL_K      elements per row
//   JL_ALIGN  alignment (2, 4, 8 or 16) of every row start: the loads are as wide as it allows
//
// Weights::decode8(row, e, w) writes elements e..e+7 of a row (e a multiple of 8). Quantized
// rows hold whole blocks (JL_K a multiple of 32); float rows may end inside the 8 (JL_K % 8 != 0),
// and elements past the end read as 0.

struct WeightsQ4_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 5) * kBlockBytes;
    const int j0 = e & 31;
    const float d = h2f(ldU16(b));
    u32 q[2];
    ld8<alignAt(kA, 2)>(b + 2 + (j0 & 15), q);
    const int shift = j0 >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = __fmul_rn(float(int((byteOf(q, i) >> shift) & 0xF) - 8), d);
  }
};

struct WeightsQ4_1 {
  static constexpr int kBlockElems = 32, kBlockBytes = 20, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 5) * kBlockBytes;
    const int j0 = e & 31;
    const float d = h2f(ldU16(b));
    const float m = h2f(ldU16(b + 2));
    u32 q[2];
    ld8<alignAt(kA, 4)>(b + 4 + (j0 & 15), q);
    const int shift = j0 >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = __fadd_rn(__fmul_rn(float((byteOf(q, i) >> shift) & 0xF), d), m);
  }
};

struct WeightsQ5_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 22, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 5) * kBlockBytes;
    const int j0 = e & 31;
    const float d = h2f(ldU16(b));
    const u32 qh = ld4<alignAt(kA, 2)>(b + 2);
    u32 q[2];
    ld8<alignAt(kA, 6)>(b + 6 + (j0 & 15), q);
    const int shift = j0 >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int v = int(((byteOf(q, i) >> shift) & 0xF) | (((qh >> (j0 + i)) & 1u) << 4));
      w[i] = __fmul_rn(float(v - 16), d);
    }
  }
};

struct WeightsQ5_1 {
  static constexpr int kBlockElems = 32, kBlockBytes = 24, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 5) * kBlockBytes;
    const int j0 = e & 31;
    const float d = h2f(ldU16(b));
    const float m = h2f(ldU16(b + 2));
    const u32 qh = ld4<alignAt(kA, 4)>(b + 4);
    u32 q[2];
    ld8<alignAt(kA, 8)>(b + 8 + (j0 & 15), q);
    const int shift = j0 >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const u32 v = ((byteOf(q, i) >> shift) & 0xF) | (((qh >> (j0 + i)) & 1u) << 4);
      w[i] = __fadd_rn(__fmul_rn(float(v), d), m);
    }
  }
};

struct WeightsQ8_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 5) * kBlockBytes;
    const int j0 = e & 31;
    const float d = h2f(ldU16(b));
    u32 q[2];
    ld8<alignAt(kA, 2)>(b + 2 + j0, q);
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = __fmul_rn(float(int(i8(u8(byteOf(q, i))))), d);
  }
};

// The 6-bit scale and min of sub-block s of a q4_K / q5_K block (scales[12] in three words).
JL_DEV void scaleMinK4(const u32 sw[3], int s, u32* sc, u32* mn) {
  const auto at = [&](int i) -> u32 { return (sw[i >> 2] >> (8 * (i & 3))) & 0xFFu; };
  if (s < 4) {
    *sc = at(s) & 63;
    *mn = at(s + 4) & 63;
  } else {
    *sc = (at(s + 4) & 0xF) | ((at(s - 4) >> 6) << 4);
    *mn = (at(s + 4) >> 4) | ((at(s) >> 6) << 4);
  }
}

// scaleMinK4's scale (or min, `wantMin`) of sub-block s from the three bytes that rule reads, byte
// s % 4 of each word: low = scales[s % 4], mid = scales[4 + s % 4], high = scales[8 + s % 4]. For a
// thread whose s is its own: scaleMinK4's run-time index into the words put them in local memory
// there (the tensor-core prefill's prepare() stored and reloaded them every unit), while in decode,
// where s depends only on the unit, the array form takes fewer registers (56 against 62, ptxas).
// Selects rather than branches: per thread and unit in prepare(), where branches cost ~25
// instructions a unit and warp (SASS).
JL_DEV u32 scaleOrMinK4(u32 low, u32 mid, u32 high, int s, bool wantMin) {
  const u32 first = wantMin ? mid : low;  // s < 4: the value's 6 bits; else its top 2 bits, 6 up
  const u32 upper = ((high >> (wantMin ? 4 : 0)) & 0xF) | ((first >> 6) << 4);
  return s < 4 ? first & 63 : upper;
}

struct WeightsQ4_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 8) * kBlockBytes;
    const int j = e & 255, s = j >> 5, p = j >> 6, l0 = j & 31;
    u32 head[4];  // d, dmin, scales[12]: one 16-byte load when rows are 16-byte aligned
    ld16<kA>(b, head);
    const float d = h2f(u16(head[0] & 0xFFFFu));
    const float dmin = h2f(u16(head[0] >> 16));
    const u32 sw[3] = {head[1], head[2], head[3]};
    u32 sc, mn;
    scaleMinK4(sw, s, &sc, &mn);
    const float d1 = __fmul_rn(d, float(sc)), m1 = __fmul_rn(dmin, float(mn));
    u32 q[2];
    ld8<alignAt(kA, 8)>(b + 16 + 32 * p + l0, q);
    const int shift = (s & 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = __fsub_rn(__fmul_rn(d1, float((byteOf(q, i) >> shift) & 0xF)), m1);
  }
};

struct WeightsQ5_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 176, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 8) * kBlockBytes;
    const int j = e & 255, s = j >> 5, p = j >> 6, l0 = j & 31;
    u32 head[4];  // d, dmin, scales[12]: one 16-byte load when rows are 16-byte aligned
    ld16<kA>(b, head);
    const float d = h2f(u16(head[0] & 0xFFFFu));
    const float dmin = h2f(u16(head[0] >> 16));
    const u32 sw[3] = {head[1], head[2], head[3]};
    u32 sc, mn;
    scaleMinK4(sw, s, &sc, &mn);
    const float d1 = __fmul_rn(d, float(sc)), m1 = __fmul_rn(dmin, float(mn));
    u32 qh[2], q[2];
    ld8<alignAt(kA, 8)>(b + 16 + l0, qh);
    ld8<alignAt(kA, 8)>(b + 48 + 32 * p + l0, q);
    const int shift = (s & 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const u32 v = ((byteOf(q, i) >> shift) & 0xF) + (((byteOf(qh, i) >> s) & 1u) << 4);
      w[i] = __fsub_rn(__fmul_rn(d1, float(v)), m1);
    }
  }
};

struct WeightsQ6_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kA = alignAt(JL_ALIGN, kBlockBytes);
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    const u8* b = row + (e >> 8) * kBlockBytes;
    const int j = e & 255, h = j >> 7, quarter = (j >> 5) & 3, l0 = j & 31;
    const float d = h2f(ldU16(b + 208));
    const float sc = float(int(i8(u8(ldU8(b + 192 + 8 * h + 2 * quarter + (l0 >> 4))))));
    const float ds = __fmul_rn(d, sc);
    u32 ql[2], qh[2];
    ld8<kA>(b + 64 * h + 32 * (quarter & 1) + l0, ql);
    ld8<kA>(b + 128 + 32 * h + l0, qh);
    const int qlShift = 4 * (quarter >> 1), qhShift = 2 * quarter;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int v = int(((byteOf(ql, i) >> qlShift) & 0xF) | (((byteOf(qh, i) >> qhShift) & 3u) << 4)) - 32;
      w[i] = __fmul_rn(ds, float(v));
    }
  }
};

// Plain float rows. Elements past JL_K (only when JL_K % 8 != 0) read as 0.
template <int kElementBytes>
JL_DEV void loadFloatRow8(const u8* row, int e, u32 raw[8]) {
  constexpr int kA = alignAt(JL_ALIGN, 8 * kElementBytes);
  if constexpr (JL_K % 8 == 0) {
    if constexpr (kElementBytes == 2) {
      ld16<kA>(row + 2 * e, raw);
    } else {
      ld16<kA>(row + 4 * e, raw);
      ld16<kA>(row + 4 * e + 16, raw + 4);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; i++) {
      raw[i] = 0;
      if (e + i < JL_K)
        raw[i] = kElementBytes == 2 ? ldU16(row + 2 * (e + i)) : ld4<alignAt(JL_ALIGN, 4)>(row + 4 * (e + i));
    }
  }
}

struct WeightsF32 {
  static constexpr int kBlockElems = 1, kBlockBytes = 4;
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    u32 raw[8];
    loadFloatRow8<4>(row, e, raw);
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = __uint_as_float(raw[i]);
  }
};

struct WeightsF16 {
  static constexpr int kBlockElems = 1, kBlockBytes = 2;
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    u32 raw[8];
    loadFloatRow8<2>(row, e, raw);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const u32 word = JL_K % 8 == 0 ? raw[i >> 1] >> (16 * (i & 1)) : raw[i];
      w[i] = h2f(u16(word & 0xFFFFu));
    }
  }
};

struct WeightsBF16 {
  static constexpr int kBlockElems = 1, kBlockBytes = 2;
  static JL_DEV void decode8(const u8* row, int e, float w[8]) {
    u32 raw[8];
    loadFloatRow8<2>(row, e, raw);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const u32 word = JL_K % 8 == 0 ? raw[i >> 1] >> (16 * (i & 1)) : raw[i];
      w[i] = bf2f(u16(word & 0xFFFFu));
    }
  }
};

#if JL_WTYPE == 0
typedef WeightsF32 Weights;
#elif JL_WTYPE == 1
typedef WeightsF16 Weights;
#elif JL_WTYPE == 2
typedef WeightsQ4_0 Weights;
#elif JL_WTYPE == 3
typedef WeightsQ4_1 Weights;
#elif JL_WTYPE == 6
typedef WeightsQ5_0 Weights;
#elif JL_WTYPE == 7
typedef WeightsQ5_1 Weights;
#elif JL_WTYPE == 8
typedef WeightsQ8_0 Weights;
#elif JL_WTYPE == 12
typedef WeightsQ4_K Weights;
#elif JL_WTYPE == 13
typedef WeightsQ5_K Weights;
#elif JL_WTYPE == 14
typedef WeightsQ6_K Weights;
#elif JL_WTYPE == 30
typedef WeightsBF16 Weights;
#else
#error "JL_WTYPE: not a weight type these kernels decode"
#endif
