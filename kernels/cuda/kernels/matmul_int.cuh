// Matrix products on integer dot products (dp4a): q4_K and q6_K weights against activations in
// the ~15-bit integer form of quantize_x.cuh. The float kernels (matmul.cuh) decode every weight
// to float first, ~15 instructions per element, which leaves decode bound by instruction issue and
// load latency far below the memory bandwidth (docs/cuda.md); here a weight costs about one
// instruction: 4 weights x 4 activation bytes per dp4a, two dp4a (a and b) per 4 weights, and a
// few float operations per 16-64 weights.
//
// Specialised by JL_WTYPE (12 q4_K, 14 q6_K), JL_K (elements per row), JL_ALIGN (alignment of
// every row start), JL_TOKENS (tokens per warp: 1, 4 or 16) and JL_ROWS (rows per warp). With
// JL_PARTS (2 or 3) instead of JL_WTYPE/JL_ROWS, the module's kernel is matmul_int_group: the
// products of one input by JL_PARTS matrices (a layer's q, k and v; gate and up) in one launch,
// part i of type JL_Wi at JL_Ri rows per warp; each part's rows are computed exactly as the
// single kernel computes them (the same bits), only the launch is shared. With JL_MMA = 1 the
// kernel is q4_K or q6_K prefill on int8 tensor cores (below), again with the same bits.
//
// The order of the float operations - the only ones that round - is fixed by JL_K alone: a row is
// cut into units of 64 elements (q4_K: a 32-byte run of quants and its two sub-blocks; q6_K: a
// scale group of 16 from each quarter of a half block, 16 bytes from each of its three arrays);
// lane l of the row's kLanes (32, or 16 when that balances the units: below) takes units l,
// l + kLanes, ..., adding each unit's terms to its accumulator in a fixed sequence, and the lanes'
// sums are added in lane order (JL_LANE_CHAIN, below; or by a fixed butterfly). Integer sums are
// exact in any order. So a token's result is bit-identical whichever variant (tokens, rows per
// warp) computed it: prefill and decode agree exactly.
//
// The activation row of a token (quantize_x.cuh): a[K] | b[K] | s256[K/32] | bsum[K/32] | sum8[K/8].

constexpr int kXqB = JL_K, kXqS256 = 2 * JL_K, kXqBsum = 2 * JL_K + JL_K / 8, kXqSum8 = 2 * JL_K + JL_K / 4;

// c + the dot product of the four signed bytes of a and of b.
JL_DEV int dp4a(u32 a, u32 b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The 64-bit window of (hi:lo) starting `shift` bits up.
JL_DEV u32 funnelRight(u32 lo, u32 hi, u32 shift) {
  u32 d;
  asm("shf.r.wrap.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lo), "r"(hi), "r"(shift));
  return d;
}

// 4 kWords bytes at a 2-byte aligned p, from the aligned words around them: never a byte past
// p + 4 kWords + 1 (a 4-byte aligned p needs kWords words; the last word's load then re-reads the
// one before, whose bits a shift of 0 leaves out), so a q6_K block's last scales read nothing past
// the block.
template <int kWords>
JL_DEV void ldUnaligned(const u8* p, u32 (&out)[kWords]) {
  const u64 address = reinterpret_cast<u64>(p);
  const unsigned int* w = reinterpret_cast<const unsigned int*>(address & ~u64(3));
  const u32 shift = u32(address & 3) * 8;
  u32 word[kWords + 1];
#pragma unroll
  for (int i = 0; i < kWords; i++) word[i] = __ldg(w + i);
  word[kWords] = __ldg(w + (shift ? kWords : kWords - 1));
#pragma unroll
  for (int i = 0; i < kWords; i++) out[i] = funnelRight(word[i], word[i + 1], shift);
}

struct IntQ4_K {
  static constexpr int kUnitElems = 64, kBlockBytes = 144, kA = alignAt(JL_ALIGN, kBlockBytes);
  // A row's unit u: quants of sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles) of block u / 4,
  // p = u % 4, each nibble moved to its own byte; the sub-blocks' scales and mins.
  struct Unit {
    u32 lo[8], hi[8];
    float d1[2], m1[2];
  };
  // The activations of unit u: elements 64u .. 64u + 63 as a and b bytes, the two 32-blocks'
  // s / 256 and represented sums.
  struct X {
    u32 a[16], b[16];
    float s256[2], bsum[2];
  };
  static JL_DEV void load(const u8* row, int u, Unit& w) {
    const u8* b = row + (u >> 2) * kBlockBytes;
    const int p = u & 3;
    u32 head[4];
    ld16<kA>(b, head);
    u32 q[8];
    ld16<alignAt(kA, 16)>(b + 16 + 32 * p, q);
    ld16<alignAt(kA, 16)>(b + 32 + 32 * p, q + 4);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      w.lo[i] = q[i] & 0x0F0F0F0Fu;
      w.hi[i] = (q[i] >> 4) & 0x0F0F0F0Fu;
    }
    scales(head, p, w.d1, w.m1);
  }
  // d * scale and dmin * min of sub-blocks 2p and 2p + 1, from the block's first 16 bytes.
  static JL_DEV void scales(const u32 (&head)[4], int p, float (&d1)[2], float (&m1)[2]) {
    const float d = h2f(u16(head[0] & 0xFFFFu)), dmin = h2f(u16(head[0] >> 16));
    const u32 sw[3] = {head[1], head[2], head[3]};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      u32 sc, mn;
      scaleMinK4(sw, 2 * p + i, &sc, &mn);
      d1[i] = __fmul_rn(d, float(sc));
      m1[i] = __fmul_rn(dmin, float(mn));
    }
  }
  static JL_DEV void loadX(const u8* xr, int u, X& x) {
    const uint4* a = reinterpret_cast<const uint4*>(xr + 64 * u);
    const uint4* b = reinterpret_cast<const uint4*>(xr + kXqB + 64 * u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint4 va = __ldg(a + i), vb = __ldg(b + i);
      x.a[4 * i] = va.x, x.a[4 * i + 1] = va.y, x.a[4 * i + 2] = va.z, x.a[4 * i + 3] = va.w;
      x.b[4 * i] = vb.x, x.b[4 * i + 1] = vb.y, x.b[4 * i + 2] = vb.z, x.b[4 * i + 3] = vb.w;
    }
    const float2 s = __ldg(reinterpret_cast<const float2*>(xr + kXqS256) + u);
    const float2 m = __ldg(reinterpret_cast<const float2*>(xr + kXqBsum) + u);
    x.s256[0] = s.x, x.s256[1] = s.y, x.bsum[0] = m.x, x.bsum[1] = m.y;
  }
  static JL_DEV float dot(const Unit& w, const X& x, float acc) {
    int la0 = 0, lb0 = 0, la1 = 0, lb1 = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      la0 = dp4a(w.lo[i], x.a[i], la0);
      lb0 = dp4a(w.lo[i], x.b[i], lb0);
      la1 = dp4a(w.hi[i], x.a[8 + i], la1);
      lb1 = dp4a(w.hi[i], x.b[8 + i], lb1);
    }
    // |256 la + lb| <= 32 * 15 * 32639 < 2^24: converts exactly.
    acc = fmaf(__fmul_rn(w.d1[0], x.s256[0]), float(la0 * 256 + lb0), acc);
    acc = fmaf(-w.m1[0], x.bsum[0], acc);
    acc = fmaf(__fmul_rn(w.d1[1], x.s256[1]), float(la1 * 256 + lb1), acc);
    acc = fmaf(-w.m1[1], x.bsum[1], acc);
    return acc;
  }
};

struct IntQ6_K {
  static constexpr int kUnitElems = 64, kBlockBytes = 210;
  // A row's unit u (block u / 4, half h = u / 2 % 2, j = u % 2): for the quarters qt = 0..3 the 16
  // elements 128h + 32qt + 16j .. + 15 of the block - each exactly one of its 16-element scale
  // groups (8h + 2qt + j) - as 6-bit quants 0..63 in bytes (q[qt]), and d * scale of each group.
  // A group's integer sums come first and its float steps once per 16 weights (units of 8 elements
  // of each quarter would take the float steps once per 8: a third more instructions for the
  // prefill products, where they dominate).
  struct Unit {
    u32 q[4][4];
    float ds[4];
  };
  struct X {
    u32 a[4][4], b[4][4];
    int sum16[4];
    float s256[4];
  };
  static JL_DEV int firstElement(int u) { return (u >> 2) * 256 + ((u >> 1) & 1) * 128 + (u & 1) * 16; }
  static JL_DEV void load(const u8* row, int u, Unit& w) {
    const u8* b = row + (u >> 2) * kBlockBytes;
    const int h = (u >> 1) & 1, j = u & 1;
    u32 ql0[4], ql1[4], qh[4], sc[2];
    ldUnaligned(b + 64 * h + 16 * j, ql0);
    ldUnaligned(b + 64 * h + 32 + 16 * j, ql1);
    ldUnaligned(b + 128 + 32 * h + 16 * j, qh);
    ldUnaligned(b + 192 + 8 * h, sc);  // the half's 8 scales: group 2qt + j is byte 2qt + j
#pragma unroll
    for (int i = 0; i < 4; i++) {
      w.q[0][i] = (ql0[i] & 0x0F0F0F0Fu) | ((qh[i] << 4) & 0x30303030u);
      w.q[1][i] = (ql1[i] & 0x0F0F0F0Fu) | ((qh[i] << 2) & 0x30303030u);
      w.q[2][i] = ((ql0[i] >> 4) & 0x0F0F0F0Fu) | (qh[i] & 0x30303030u);
      w.q[3][i] = ((ql1[i] >> 4) & 0x0F0F0F0Fu) | ((qh[i] >> 2) & 0x30303030u);
    }
    const float d = h2f(ldU16(b + 208));
#pragma unroll
    for (int qt = 0; qt < 4; qt++) {
      const int byte = 2 * qt + j;
      const float scale = float(int(i8(u8(sc[byte >> 2] >> (8 * (byte & 3))))));
      w.ds[qt] = __fmul_rn(d, scale);
    }
  }
  static JL_DEV void loadX(const u8* xr, int u, X& x) {
    const int e = firstElement(u);
#pragma unroll
    for (int qt = 0; qt < 4; qt++) {
      const uint4 va = __ldg(reinterpret_cast<const uint4*>(xr + e + 32 * qt));
      const uint4 vb = __ldg(reinterpret_cast<const uint4*>(xr + kXqB + e + 32 * qt));
      x.a[qt][0] = va.x, x.a[qt][1] = va.y, x.a[qt][2] = va.z, x.a[qt][3] = va.w;
      x.b[qt][0] = vb.x, x.b[qt][1] = vb.y, x.b[qt][2] = vb.z, x.b[qt][3] = vb.w;
      const int2 s8 = __ldg(reinterpret_cast<const int2*>(xr + kXqSum8) + (e + 32 * qt) / 16);
      x.sum16[qt] = s8.x + s8.y;
      x.s256[qt] = __ldg(reinterpret_cast<const float*>(xr + kXqS256) + (e + 32 * qt) / 32);
    }
  }
  static JL_DEV float dot(const Unit& w, const X& x, float acc) {
#pragma unroll
    for (int qt = 0; qt < 4; qt++) {
      int la = 0, lb = 0;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        la = dp4a(w.q[qt][i], x.a[qt][i], la);
        lb = dp4a(w.q[qt][i], x.b[qt][i], lb);
      }
      // The quants' offset of 32: sum (q - 32)(256a + b) = 256 la + lb - 32 sum16, exact, and
      // |that| <= 16 * 32 * 32767 < 2^24, so it converts exactly.
      const int l = la * 256 + lb - 32 * x.sum16[qt];
      acc = fmaf(__fmul_rn(w.ds[qt], x.s256[qt]), float(l), acc);
    }
    return acc;
  }
};

// The weight type of a GGUF type number.
template <int kType>
struct IntWeightsOf;
template <>
struct IntWeightsOf<12> {
  typedef IntQ4_K Type;
};
template <>
struct IntWeightsOf<14> {
  typedef IntQ6_K Type;
};

static_assert(JL_K % 256 == 0, "K-quant rows hold whole 256-element blocks");
// How rows of W are cut over a warp. Lanes per row: 32, or 16 when that splits the units evenly
// and 32 would not (a 3072-element q4_K row has 48 units: 16 lanes take 3 each, where 32 lanes
// would leave half the warp idle for the second). A warp then serves two rows at a time, one per
// half (kSlots = 2).
template <class W>
struct RowSplit {
  static constexpr int kUnits = JL_K / W::kUnitElems;
  static constexpr int kLanes = (kUnits % 32 != 0 && kUnits % 16 == 0) ? 16 : 32;
  static constexpr int kSlots = 32 / kLanes;
};

// How the lanes' sums of a row are added (a define, so that an A/B can set it for every module:
// decode and prefill must agree). 0: the fixed butterfly of storeLaneSums (common.cuh). 1: in lane
// order, ((-0 + L0) + L1) + ... (storeLaneSumsInOrder below), which the tensor-core kernel follows
// with one running total per (row, token) instead of a stack of partial trees.
#ifndef JL_LANE_CHAIN
#define JL_LANE_CHAIN 1
#endif

// The end of a matrix product with JL_LANE_CHAIN: each (row, token) accumulator summed over the
// kLanes lanes that hold it in lane order, starting from -0 (so the first lane's value comes
// through unchanged, -0 included). The warp's values pass through shared memory, 32 (row, token)
// pairs at a time: lane l writes its value of each, then one lane per pair reads the kLanes values
// and adds them in order. (Shuffles instead, for decode's one or two pairs, made decode 3.5 %
// slower.) Called by whole warps of a 128-thread block.
template <int kLanes, int kRows, int kTokens>
JL_DEV void storeLaneSumsInOrder(const float (&acc)[kRows][kTokens], int sub, int r0, int t0, int rows, int tokens,
                                 float* __restrict__ y, const float* __restrict__ bias) {
  constexpr int kPairs = kRows * kTokens, kRound = kPairs < 32 ? kPairs : 32;
  __shared__ float staged[4][kRound][33];  // [warp][pair][lane], padded: a row's reads hit distinct banks
  const int lane = threadIdx.x & 31, base = lane - sub;
  float(*mine)[33] = staged[threadIdx.x >> 5];
#pragma unroll
  for (int p0 = 0; p0 < kPairs; p0 += kRound) {
#pragma unroll
    for (int j = 0; j < kRound; j++) {
      if (p0 + j < kPairs) mine[j][lane] = acc[(p0 + j) / kTokens][(p0 + j) % kTokens];
    }
    __syncwarp();
    for (int j = sub; j < kRound && p0 + j < kPairs; j += kLanes) {
      float sum = -0.0f;
#pragma unroll
      for (int l = 0; l < kLanes; l++) sum += mine[j][base + l];
      const int row = r0 + (p0 + j) / kTokens, token = t0 + (p0 + j) % kTokens;
      if (row < rows && token < tokens) y[i64(token) * rows + row] = bias ? __fadd_rn(sum, bias[row]) : sum;
    }
    __syncwarp();
  }
}

#ifdef JL_WTYPE
typedef IntWeightsOf<JL_WTYPE>::Type IntWeights;
#if JL_MMA  // (productWarp, below, has its own)
constexpr int kUnits = RowSplit<IntWeights>::kUnits;
constexpr int kLanes = RowSplit<IntWeights>::kLanes;
#endif
#endif

#if JL_MMA
// Products of 32 tokens or more on int8 tensor cores (mma.sync, sm_80 and later; JL_MMA = 1, with
// JL_ROWS = 16 and JL_TOKENS = 16 or 32): q4_K rows (16-byte aligned) and q6_K rows. A block of
// 2 JL_MMA_ROW_WARPS warps computes 16 JL_MMA_ROW_WARPS rows x 2 JL_TOKENS tokens, warp (wr, wt) =
// (warp % JL_MMA_ROW_WARPS, warp / JL_MMA_ROW_WARPS) its 16 rows 16 wr.. x JL_TOKENS tokens
// JL_TOKENS wt... Per unit, mma give
// each (row, token) the unit's integer sums - the same integers the dp4a kernel adds up, exact in
// any order - and then the float steps are IntQ4_K::dot's (IntQ6_K::dot's), in its order. What the
// dp4a kernel's lanes do across the row is reproduced per (row, token) in registers: lane slot l's
// accumulator takes units l, l + kLanes, ... in order from zero, and each finished slot joins a
// running total in slot order (JL_LANE_CHAIN: 16 registers for the sums, so 3 blocks an SM for
// q4_K and no spills for q6_K). With the butterfly instead the slots are visited in bit-reversed
// order, which is its tree's left-to-right order, and each finished slot merges into a stack like a
// binary counter (depth log2(kLanes) + 1: 48 registers). So a token's result has the bits of every
// other variant, and prefill still agrees with decode exactly.
//
// Units reach shared memory kStages - 1 ahead of the one computed, by cp.async (the whole block's
// weights and activations for the unit: a first version loaded each warp's fragments with 4-byte
// loads straight from global memory and was bound by the L1 traffic, at a quarter of the issue
// rate). One unit ahead, four threads a row turn its staged bytes into what the mma read, in place
// (Mma::prepare: the scales as floats; for q6_K also the quants as bytes in k order); fragments
// come out of shared memory by ldmatrix.
//
// Fragments (PTX ISA, lane = 4 g + q): m16n8k32: A (16 x 32 row-major) a[0] = A[g][4q..],
// a[1] = A[g+8][4q..], a[2] = A[g][16+4q..], a[3] = A[g+8][16+4q..]; B (32 x 8 column-major)
// b[0] = B[4q..][g], b[1] = B[16+4q..][g]. m16n8k16: a[0], a[1] and b[0] alone. C c[0] = C[g][2q],
// c[1] = C[g][2q+1], c[2] = C[g+8][2q], c[3] = C[g+8][2q+1]. With A's rows and B's columns 16-byte
// rows of shared memory, ldmatrix hands out exactly these.
static_assert((JL_WTYPE == 12 && JL_ALIGN >= 16 || JL_WTYPE == 14) && (JL_TOKENS == 16 || JL_TOKENS == 32) &&
                  JL_ROWS == 16,
              "matmul_int JL_MMA: q4_K (16-byte aligned rows) or q6_K, 16 rows x 16 or 32 tokens a warp");
constexpr int kSlotBits = kLanes == 32 ? 5 : 4;
#ifndef JL_MMA_STAGES  // units in shared memory at once (a tuning define: JITLLM_CUDA_DEFINES)
// Four, but three for q6_K at 32 tokens a warp: four of its 14 KB stages would pass the 48 KB a
// block's static shared memory may take.
#define JL_MMA_STAGES (JL_WTYPE == 14 && JL_TOKENS == 32 ? 3 : 4)
#endif
// Blocks per SM the registers must allow (a tuning define, both types): q4_K 3 at 16 tokens a warp
// (80 registers, no spills) and 2 at 32 (122), q6_K 2 (128; at 32 tokens a warp it spills ~40
// bytes, and one block an SM without spills was slower); with the butterfly's stack
// (JL_LANE_CHAIN=0) 2 for both. q4_K gains from a third block an SM and nothing from a fourth; q6_K
// spills at three and four and loses more than a tenth (timings in docs/benchmarks.md).
#ifndef JL_MMA_MIN_BLOCKS_Q6  // q6_K's alone
#define JL_MMA_MIN_BLOCKS_Q6 2
#endif
#ifndef JL_MMA_MIN_BLOCKS
#define JL_MMA_MIN_BLOCKS (JL_WTYPE == 14 ? JL_MMA_MIN_BLOCKS_Q6 : !JL_LANE_CHAIN || JL_TOKENS == 32 ? 2 : 3)
#endif
// A warp's tile is 16 rows x JL_TOKENS tokens (kWarpTiles mma columns of 8), the block's 4 x 2 of
// them. 32 tokens a warp halves what staging, prepare() and the loop cost per (row, token) -
// work done once per row and unit whatever the tokens - for 16 more registers of sums.
// JL_MMA_ROW_WARPS: warps a block stacks over the rows (4: the 64-row tile of prefill; 2 or 1 for
// decode batches, whose few tokens would otherwise leave most SMs without a block). Each warp's
// work is the same whatever the tile, so every row and token gets the same bits.
#ifndef JL_MMA_ROW_WARPS
#define JL_MMA_ROW_WARPS 4
#endif
constexpr int kRowWarps = JL_MMA_ROW_WARPS;
static_assert(kRowWarps == 1 || kRowWarps == 2 || kRowWarps == 4, "JL_MMA_ROW_WARPS: 1, 2 or 4");
constexpr int kTileRows = 16 * kRowWarps, kTileTokens = 2 * JL_TOKENS, kStages = JL_MMA_STAGES,
              kThreads = 64 * kRowWarps;
constexpr int kWarpTiles = JL_TOKENS / 8, kAccCols = 2 * kWarpTiles;  // a thread: 2 tokens of each mma column
typedef float Acc[2][kAccCols];  // a thread's sums: rows g, g + 8 of its warp x its kAccCols tokens
// A token's a and b bytes of a unit are 8 pieces of 16 bytes for both types; a thread stages this
// many of the block's.
constexpr int kTokenPieces = kTileTokens * 8 / kThreads;
static_assert(kThreads == 4 * kTileRows, "staging and prepare() give each row four threads");
static_assert(2 * kTileTokens <= kThreads, "a thread stages each token's two sums (q4_K) or scales (q6_K)");
static_assert(kTokenPieces * kThreads == kTileTokens * 8, "the tokens' pieces spread evenly over the threads");
static_assert(kStages >= 3, "a unit computed, one prepared, one in flight");

JL_DEV void mmaS8(int (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
JL_DEV void mmaS8k16(int (&c)[4], u32 a0, u32 a1, u32 b0) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
#endif
}
JL_DEV void loadMatrices(u32 (&r)[4], u32 at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at)
               : "memory");
}

// Constant for each unrolled step, so the stack below stays in registers.
__host__ __device__ constexpr int bitReversed(int i) {
  int r = 0;
  for (int b = 0; b < kSlotBits; b++) r |= ((i >> b) & 1) << (kSlotBits - 1 - b);
  return r;
}
JL_DEV constexpr int onesIn(int i) { return i == 0 ? 0 : (i & 1) + onesIn(i >> 1); }

// The order units are visited in (staged, prepared and computed): slot by slot - in bit-reversed
// order for the butterfly's stack, in order for JL_LANE_CHAIN - units slot, slot + kLanes, ... of
// each. Entry n is the n-th unit visited, with kSlotEnd set where it is its slot's last. A table
// in constant memory (one uniform load a unit) rather than a walk of slots and units on each
// visit, which took ~25 of the loop's ~410 instructions a unit and warp (SASS).
struct VisitOrder {
  static constexpr u16 kSlotEnd = 0x8000;
  u16 entry[kUnits];
  __host__ __device__ constexpr VisitOrder() : entry() {
    int n = 0;
    for (int i = 0; i < kLanes; i++) {
      const int slot = JL_LANE_CHAIN ? i : bitReversed(i);
      for (int u = slot; u < kUnits; u += kLanes) entry[n++] = u16(u | (u + kLanes >= kUnits ? kSlotEnd : 0));
    }
  }
};
static_assert(kUnits < VisitOrder::kSlotEnd, "unit numbers fit below the flag");
__constant__ const VisitOrder kVisitOrder = VisitOrder();
JL_DEV int unitVisited(int n) { return kVisitOrder.entry[n] & ~VisitOrder::kSlotEnd; }

// The block's tile: its rows of W and tokens of the activations (the last repeated past the end).
struct MmaTile {
  const u8* w;
  u64 rowStride;
  int rows, r0;
  const u8* xq;
  u64 xqStride;
  int tokens, t0;
  JL_DEV const u8* row(int r) const { return w + u64(min(r0 + r, rows - 1)) * rowStride; }
  JL_DEV const u8* token(int t) const { return xq + u64(min(t0 + t, tokens - 1)) * xqStride; }
};

// q4_K: a stage holds each row's unit - its 32 quant bytes, then the block's 16-byte head, which
// prepare() turns into d1[2], m1[2] in place - 48 bytes (12 words) apart, so the 8 rows an ldmatrix
// reads hit distinct banks; so do 8 tokens 144 bytes (36 words) apart: a[64] | b[64] | s256[2] |
// bsum[2]. A sub-block's 32 quants are the low (or high) nibbles of 32 consecutive bytes.
struct MmaQ4_K {
  static constexpr int kRowBytes = 48, kTokenBytes = 144, kTokensAt = kTileRows * kRowBytes;
  static constexpr int kStageBytes = kTokensAt + kTileTokens * kTokenBytes;
  // This thread's pieces of every unit: where unit 0's come from and go, computed once (the 64-bit
  // row and token addresses took ~30 instructions a unit and warp when worked out per unit).
  struct Stager {
    const u8* row;  // tid < 3 kTileRows: row tid / 3's piece tid % 3 of unit 0 - quants (two) or head
    int rowTo, quantStep;
    const u8* token[kTokenPieces];  // token (tid + k kThreads) / 8's piece (tid % 8) of unit 0
    const u8* sums;                 // tid < 2 kTileTokens: token tid / 2's s / 256 or sums of unit 0
    int sumsTo;
    JL_DEV explicit Stager(const MmaTile& tile) {
      const int tid = threadIdx.x, r = tid / 3, piece = tid % 3;
      row = tile.row(min(r, kTileRows - 1)) + (piece < 2 ? 16 + 16 * piece : 0);
      rowTo = r * kRowBytes + 16 * piece;
      quantStep = piece < 2 ? 32 : 0;  // the quant pieces move 32 bytes a unit in the block; the head stays
#pragma unroll
      for (int k = 0; k < kTokenPieces; k++) {
        const int i = tid + k * kThreads;
        token[k] = tile.token(i >> 3) + ((i & 7) >> 2) * kXqB + 16 * (i & 3);
      }
      sums = tile.token(min(tid >> 1, kTileTokens - 1)) + (tid & 1 ? kXqBsum : kXqS256);
      sumsTo = kTokensAt + (tid >> 1) * kTokenBytes + 128 + 8 * (tid & 1);
    }
    JL_DEV void stage(u8* stage, int unit) const {
      const int tid = threadIdx.x;
      const u32 at = sharedAddress(stage);
      if (tid < 3 * kTileRows)
        copyAsync16(at + rowTo, row + (unit >> 2) * IntQ4_K::kBlockBytes + quantStep * (unit & 3));
#pragma unroll
      for (int k = 0; k < kTokenPieces; k++)
        copyAsync16(at + kTokensAt + ((tid + k * kThreads) >> 3) * kTokenBytes + 16 * (tid & 7), token[k] + 64 * unit);
      if (tid < 2 * kTileTokens) copyAsync8(at + sumsTo, sums + 8 * unit);
    }
  };
  // Four threads (lanes of one warp) a row, each one of its floats d1[0], d1[1], m1[0], m1[1]
  // (IntQ4_K::scales's operations), written over the head once all four have read it.
  static JL_DEV void prepare(u8* stage, const Stager&, int unit) {
    const int row = threadIdx.x >> 2, which = threadIdx.x & 3;
    float* at = reinterpret_cast<float*>(stage + row * kRowBytes + 32);
    const uint4 v = *reinterpret_cast<const uint4*>(at);
    __syncwarp();
    const int s = 2 * (unit & 3) + (which & 1);
    const u32 shift = 8 * (s & 3);
    const u32 bits =
        scaleOrMinK4((v.y >> shift) & 0xFFu, (v.z >> shift) & 0xFFu, (v.w >> shift) & 0xFFu, s, which >= 2);
    at[which] = __fmul_rn(h2f(u16(which < 2 ? v.x & 0xFFFFu : v.x >> 16)), float(bits));
  }
  // The staged unit's terms for this thread's 2 rows x kAccCols tokens, added to acc[row][token]
  // as IntQ4_K::dot.
  static JL_DEV void compute(const u8* stage, Acc& acc) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int rowBase = (warp % kRowWarps) * 16, tokenBase = (warp / kRowWarps) * JL_TOKENS;
    u32 raw[4];
    loadMatrices(raw, sharedAddress(stage + (rowBase + (lane & 15)) * kRowBytes + 16 * (lane >> 4)));
    u32 lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; i++) lo[i] = raw[i] & 0x0F0F0F0Fu, hi[i] = (raw[i] >> 4) & 0x0F0F0F0Fu;
    float4 sc[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
      sc[i] = *reinterpret_cast<const float4*>(stage + (rowBase + g + 8 * i) * kRowBytes + 32);
#pragma unroll
    for (int j = 0; j < kWarpTiles; j++) {  // tokens tokenBase + 8 j ..
      const u8* tokens = stage + kTokensAt + (tokenBase + 8 * j) * kTokenBytes;
      u32 xa[4], xb[4];
      loadMatrices(xa, sharedAddress(tokens + (lane & 7) * kTokenBytes + 16 * (lane >> 3)));
      loadMatrices(xb, sharedAddress(tokens + (lane & 7) * kTokenBytes + 64 + 16 * (lane >> 3)));
      // 256 la + lb of each sub-block: la by one mma, times 256, then lb added by a second (exact:
      // below 2^24), so the four sums never take 16 registers at once.
      int l0[4] = {}, l1[4] = {};
      mmaS8(l0, lo, xa[0], xa[1]);
      mmaS8(l1, hi, xa[2], xa[3]);
#pragma unroll
      for (int e = 0; e < 4; e++) l0[e] *= 256, l1[e] *= 256;
      mmaS8(l0, lo, xb[0], xb[1]);
      mmaS8(l1, hi, xb[2], xb[3]);
#pragma unroll
      for (int h = 0; h < 2; h++) {  // token tokenBase + 8 j + 2q + h: column c = 2 j + h of acc
        const float4 s = *reinterpret_cast<const float4*>(tokens + (2 * q + h) * kTokenBytes + 128);
#pragma unroll
        for (int i = 0; i < 2; i++) {  // row rowBase + g + 8i: C element 2i + h
          const int e = 2 * i + h;
          float v = acc[i][2 * j + h];
          v = fmaf(__fmul_rn(sc[i].x, s.x), float(l0[e]), v);
          v = fmaf(-sc[i].z, s.z, v);
          v = fmaf(__fmul_rn(sc[i].y, s.y), float(l1[e]), v);
          v = fmaf(-sc[i].w, s.w, v);
          acc[i][2 * j + h] = v;
        }
      }
    }
  }
};

// q6_K: unit u is IntQ6_K's - four 16-element scale groups. Its 210-byte blocks are only 2-byte
// aligned, so a stage holds each row's aligned words around the unit's pieces: 5 around each 16
// bytes of ql (low nibbles), ql (high) and qh, 3 around the half's 8 scales, 1 around d - 19 words,
// which prepare() turns in place into the 64 quants less their offset (q - 32, signed bytes) in k
// order (group qt at bytes 16 qt..) and the four d * scale: 80 bytes (20 words) a row, so 8 rows an
// ldmatrix reads hit distinct banks. A token: a[64] | b[64] in that k order and s256[4] of the unit
// (144 bytes, 36 words: distinct banks too). One m16n8k16 mma per group gives its 16-element sums
// of (q - 32) a and (q - 32) b, so 256 la + lb is IntQ6_K::dot's integer without the 8-column sums
// (the same integer: sums are exact).
struct MmaQ6_K {
  static constexpr int kRowBytes = 80, kRawWords = 19, kTokenBytes = 144, kTokensAt = kTileRows * kRowBytes;
  static constexpr int kStageBytes = kTokensAt + kTileTokens * kTokenBytes;
  static JL_DEV const u8* alignedDown(const u8* p) {
    return reinterpret_cast<const u8*>(reinterpret_cast<u64>(p) & ~u64(3));
  }
  // This thread's pieces of every unit, their addresses worked out once (as MmaQ4_K::Stager). Four
  // threads a row (the row prepare() gives them), words part, part + 4, ... of the 19 around the
  // unit's pieces; a token's a and b of the four groups (k order) and their s / 256.
  // The token offsets are 32-bit, from the activations' start (the host keeps them below 4 GB):
  // with 64-bit pointers the kernel spilled more at 32 tokens a warp.
  struct Stager {
    const MmaTile& tile;
    const u8* row;            // row tid / 4
    bool lastRow;             // ... is the matrix's last: its last block's d is read by prepare()
    u32 token[kTokenPieces];  // token (tid + k kThreads) / 8's piece tid % 8 of unit 0
    u32 scales;               // tid < kTileTokens: token tid's s / 256
    JL_DEV explicit Stager(const MmaTile& t) : tile(t) {
      const int tid = threadIdx.x, r = tid >> 2;
      row = tile.row(r);
      lastRow = tile.r0 + r >= tile.rows - 1;
#pragma unroll
      for (int k = 0; k < kTokenPieces; k++)
        token[k] = u32(tile.token((tid + k * kThreads) >> 3) - tile.xq) + ((tid & 7) >> 2) * kXqB + 32 * (tid & 3);
      scales = u32(tile.token(min(tid, kTileTokens - 1)) - tile.xq) + kXqS256;
    }
    // Row tid / 4's block of the unit (prepare() reads the same row's).
    JL_DEV const u8* block(int unit) const { return row + (unit >> 2) * IntQ6_K::kBlockBytes; }
    // In a 4-byte aligned block, d's aligned word runs 2 bytes past the block: past the matrix for
    // the last row's last block. That one d is read by prepare() itself. (The scales' third word,
    // which would too for the second half, is only needed by 2-byte aligned blocks.)
    JL_DEV bool dPastTheEnd(const u8* b, int unit) const {
      return (reinterpret_cast<u64>(b) & 3) == 0 && lastRow && (unit >> 2) == JL_K / 256 - 1;
    }
    JL_DEV void stage(u8* stage, int unit) const {
      const int tid = threadIdx.x, h = (unit >> 1) & 1, j = unit & 1, r = tid >> 2, part = tid & 3;
      const u32 at = sharedAddress(stage);
      const u8* b = block(unit);
      const bool aligned = (reinterpret_cast<u64>(b) & 3) == 0, dPast = dPastTheEnd(b, unit);
#pragma unroll
      for (int word = part; word < kRawWords; word += 4) {
        const u8* from;
        if (word < 15) {
          const int piece = word / 5;
          const int offset = piece == 0 ? 64 * h + 16 * j : piece == 1 ? 64 * h + 32 + 16 * j : 128 + 32 * h + 16 * j;
          from = alignedDown(b + offset) + 4 * (word % 5);
        } else if (word < 18) {
          if (word == 17 && aligned) continue;  // the 8 scales are two words
          from = alignedDown(b + 192 + 8 * h) + 4 * (word - 15);
        } else {
          if (dPast) continue;
          from = alignedDown(b + 208);
        }
        copyAsync4(at + r * kRowBytes + 4 * word, from);
      }
      const int e0 = IntQ6_K::firstElement(unit);
#pragma unroll
      for (int k = 0; k < kTokenPieces; k++)
        copyAsync16(at + kTokensAt + ((tid + k * kThreads) >> 3) * kTokenBytes + 16 * (tid & 7),
                    tile.xq + token[k] + e0);
      if (tid < kTileTokens) copyAsync16(at + kTokensAt + tid * kTokenBytes + 128, tile.xq + scales + 4 * (e0 / 32));
    }
  };
  // Four threads (lanes of one warp) a row, thread qt its group qt: the quants as IntQ6_K::load
  // assembles them and d * scale by its operations, written once all four have read the words.
  static JL_DEV void prepare(u8* stage, const Stager& stager, int unit) {
    const int r = threadIdx.x >> 2, qt = threadIdx.x & 3, j = unit & 1;
    const u8* b = stager.block(unit);
    const int misalign =
        int(reinterpret_cast<u64>(b) & 3);  // the same for every piece: they are 4-byte multiples apart
    const u32 shift = u32(misalign) * 8;
    u8* row = stage + r * kRowBytes;
    const u32* raw = reinterpret_cast<const u32*>(row);
    const u32* ql = raw + 5 * (qt & 1);
    u32 q[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const u32 low = funnelRight(ql[i], ql[i + 1], shift), high = funnelRight(raw[10 + i], raw[11 + i], shift);
      const u32 q6 = ((qt >= 2 ? low >> 4 : low) & 0x0F0F0F0Fu) | (((high >> (2 * qt)) & 0x03030303u) << 4);
      q[i] = ((q6 | 0x80808080u) - 0x20202020u) ^ 0x80808080u;  // each byte less 32, no borrows
    }
    const int scaleByte = misalign + 2 * qt + j;  // from the scales' first word; 192 + 8h is a 4-byte multiple
    const int sc = int(i8(u8(raw[15 + (scaleByte >> 2)] >> (8 * (scaleByte & 3)))));
    const float d = h2f(stager.dPastTheEnd(b, unit) ? u16(ldU16(b + 208)) : u16(raw[18] >> shift));
    __syncwarp();
    *reinterpret_cast<uint4*>(row + 16 * qt) = make_uint4(q[0], q[1], q[2], q[3]);
    *reinterpret_cast<float*>(row + 64 + 4 * qt) = __fmul_rn(d, float(sc));
  }
  // The staged unit's terms for this thread's 2 rows x kAccCols tokens, added to acc as
  // IntQ6_K::dot.
  static JL_DEV void compute(const u8* stage, Acc& acc) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int rowBase = (warp % kRowWarps) * 16, tokenBase = (warp / kRowWarps) * JL_TOKENS;
    u32 a[2][4];  // groups 2p, 2p + 1: a[p] = {a0, a1 of group 2p, a0, a1 of group 2p + 1}
#pragma unroll
    for (int p = 0; p < 2; p++)
      loadMatrices(a[p], sharedAddress(stage + (rowBase + (lane & 15)) * kRowBytes + 32 * p + 16 * (lane >> 4)));
#pragma unroll
    for (int j = 0; j < kWarpTiles; j++) {  // tokens tokenBase + 8 j ..
      const u8* tokens = stage + kTokensAt + (tokenBase + 8 * j) * kTokenBytes;
      u32 xa[4], xb[4];  // group qt's B fragment
      loadMatrices(xa, sharedAddress(tokens + (lane & 7) * kTokenBytes + 16 * (lane >> 3)));
      loadMatrices(xb, sharedAddress(tokens + (lane & 7) * kTokenBytes + 64 + 16 * (lane >> 3)));
      // Group by group: each (row, token) takes its groups in order, as IntQ6_K::dot. The
      // tokens' and rows' scales are read per group (registers are what limits the blocks per SM).
#pragma unroll
      for (int qt = 0; qt < 4; qt++) {
        int l[4] = {};  // 256 la + lb, as in MmaQ4_K::compute
        mmaS8k16(l, a[qt >> 1][2 * (qt & 1)], a[qt >> 1][2 * (qt & 1) + 1], xa[qt]);
#pragma unroll
        for (int e = 0; e < 4; e++) l[e] *= 256;
        mmaS8k16(l, a[qt >> 1][2 * (qt & 1)], a[qt >> 1][2 * (qt & 1) + 1], xb[qt]);
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {  // token tokenBase + 8 j + 2q + hh: column 2 j + hh of acc
          const u8* token = tokens + (2 * q + hh) * kTokenBytes;
          const float s256 = *reinterpret_cast<const float*>(token + 128 + 4 * qt);
#pragma unroll
          for (int i = 0; i < 2; i++) {  // row rowBase + g + 8i: C element 2i + hh
            const int e = 2 * i + hh;
            const float ds = *reinterpret_cast<const float*>(stage + (rowBase + g + 8 * i) * kRowBytes + 64 + 4 * qt);
            acc[i][2 * j + hh] = fmaf(__fmul_rn(ds, s256), float(l[e]), acc[i][2 * j + hh]);
          }
        }
      }
    }
  }
};

#if JL_WTYPE == 12
typedef MmaQ4_K Mma;
#else
typedef MmaQ6_K Mma;
#endif

// y[t][r] = sum_k w[r][k] x[t][k] (+ bias[r]). Grid: (rows / kTileRows, tokens / (2 JL_TOKENS)),
// kThreads threads.
// (Smaller blocks, proportionally more of them an SM: the same registers a thread.)
extern "C" __global__ void __launch_bounds__(kThreads, JL_MMA_MIN_BLOCKS * 4 / kRowWarps)
    matmul_int(const u8* __restrict__ w, u64 rowStride, int rows, const u8* __restrict__ xq, u64 xqStride, int tokens,
               float* __restrict__ y, const float* __restrict__ bias) {
  awaitPreviousKernel();
#if __CUDA_ARCH__ >= 800
  __shared__ __align__(16) u8 staged[kStages][Mma::kStageBytes];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  // The unit count as the compiler cannot see it: with one unit per slot (K = 2048) it otherwise
  // unrolled every slot's work into one stretch; kept a loop, each slot's work stays apart while
  // the slot loop is unrolled for the stack's constant indices.
  int units;
  asm("mov.b32 %0, %1;" : "=r"(units) : "r"(kUnits));
  const MmaTile tile{w,  rowStride, rows,   int(blockIdx.x) * kTileRows,
                     xq, xqStride,  tokens, int(blockIdx.y) * kTileTokens};
  // Stage n % kStages holds the n-th unit visited. Each stage is one commit group (empty past the
  // last unit, so the waits below count alike to the end).
  const typename Mma::Stager stager(tile);
  const auto stageVisited = [&](int visited) {
    if (visited < units) stager.stage(staged[visited % kStages], unitVisited(visited));
    commitCopies();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; s++) stageVisited(s);
  awaitCopies<kStages - 2>();
  __syncthreads();
  Mma::prepare(staged[0], stager, unitVisited(0));
  // Unit n (the n-th visited) into acc, once it and the next have landed; the next prepared and
  // another staged meanwhile.
  int n = 0;
  const auto computeNext = [&](Acc& acc) {
    awaitCopies<kStages - 3>();  // units up to n + 1 have landed
    __syncthreads();             // ... for every thread, and unit n is prepared
    if (n + 1 < units) Mma::prepare(staged[(n + 1) % kStages], stager, unitVisited(n + 1));
    stageVisited(n + kStages - 1);  // where unit n - 1 was: every warp is past it
    Mma::compute(staged[n % kStages], acc);
    n++;
  };

#if JL_LANE_CHAIN
  // The slots' sums added in slot order as they complete, from -0 (storeLaneSumsInOrder's order).
  Acc total, acc = {};
#pragma unroll
  for (int r = 0; r < 2; r++)
#pragma unroll
    for (int c = 0; c < kAccCols; c++) total[r][c] = -0.0f;
#pragma unroll 1
  while (n < units) {
    const bool slotEnds = kVisitOrder.entry[n] & VisitOrder::kSlotEnd;
    computeNext(acc);
    if (slotEnds) {  // the slot's last unit: its sum joins the total
#pragma unroll
      for (int r = 0; r < 2; r++)
#pragma unroll
        for (int c = 0; c < kAccCols; c++) total[r][c] = total[r][c] + acc[r][c], acc[r][c] = 0.0f;
    }
  }
  const Acc& sums = total;
#else
  Acc stack[kSlotBits + 1];
#pragma unroll
  for (int i = 0; i < kLanes; i++) {
    Acc acc = {};
#pragma unroll 1
    for (int u = bitReversed(i); u < units; u += kLanes) computeNext(acc);
    // Push, then merge complete subtrees as a binary counter carries: once per trailing one of i.
    const int depth = onesIn(i);  // entries on the stack before this push
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int c = 0; c < kAccCols; c++) stack[depth][r][c] = acc[r][c];
    int top = depth;
#pragma unroll
    for (int b = i; b & 1; b >>= 1) {
#pragma unroll
      for (int r = 0; r < 2; r++)
#pragma unroll
        for (int c = 0; c < kAccCols; c++) stack[top - 1][r][c] = stack[top - 1][r][c] + stack[top][r][c];
      top--;
    }
  }
  const Acc& sums = stack[0];
#endif
  awaitCopies<0>();  // nothing left in flight when the block ends
  const int r0 = tile.r0 + (warp % kRowWarps) * 16, t0 = tile.t0 + (warp / kRowWarps) * JL_TOKENS;
#pragma unroll
  for (int r = 0; r < 2; r++) {
#pragma unroll
    for (int c = 0; c < kAccCols; c++) {
      const int row = r0 + g + 8 * r, token = t0 + 8 * (c >> 1) + 2 * q + (c & 1);
      if (row < rows && token < tokens) {
        const float sum = sums[r][c];
        y[i64(token) * rows + row] = bias ? __fadd_rn(sum, bias[row]) : sum;
      }
    }
  }
#else
  __trap();  // the host never picks this kernel below sm_80
#endif
}
#else
// Warp `warp` of a product's grid: its kRows rows (per slot) of W times its JL_TOKENS tokens.
// Returns at once when the warp has no rows (whole warps: the sums shuffle).
//
// The kernels' wait for the kernel before them (common.cuh: awaitPreviousKernel) is here, after
// the loads of the lane's first unit of weights: weights are never written by the kernels of a
// step, so their DRAM latency - most of a decode product's time - overlaps the previous kernel's
// end instead of following it. Nothing else is touched before the wait.
template <class W, int kRows>
JL_DEV void productWarp(int warp, const u8* __restrict__ w, u64 rowStride, int rows, const u8* __restrict__ xq,
                        u64 xqStride, int tokens, float* __restrict__ y, const float* __restrict__ bias) {
  constexpr int kTokens = JL_TOKENS, kLanes = RowSplit<W>::kLanes, kSlots = RowSplit<W>::kSlots;
  constexpr int kUnits = RowSplit<W>::kUnits;
  const int lane = threadIdx.x & 31, slot = lane / kLanes, sub = lane % kLanes;
  const int r0 = (warp * kSlots + slot) * kRows;  // this half-warp's (or warp's) first row
  if (warp * kSlots * kRows >= rows) return;
  const int t0 = blockIdx.y * kTokens;
  float acc[kRows][kTokens] = {};
  const u8* wr[kRows];
  rowPointers(w, rowStride, r0, rows, wr);

  typename W::Unit wu[kRows];
  if (sub < kUnits) {
#pragma unroll
    for (int r = 0; r < kRows; r++) W::load(wr[r], sub, wu[r]);
  }
  awaitPreviousKernel();

  // Decode reads each weight once: JL_UNROLL units' loads in flight per lane (a tuning define,
  // JITLLM_CUDA_DEFINES; 2 unless set).
#ifndef JL_UNROLL
#define JL_UNROLL 2
#endif
#ifndef JL_UNROLL_Q6  // the same for q6_K rows (units of nineteen 4-byte loads), alone
#define JL_UNROLL_Q6 JL_UNROLL
#endif
  constexpr int kUnroll = kTokens == 1 ? (W::kBlockBytes == IntQ6_K::kBlockBytes ? JL_UNROLL_Q6 : JL_UNROLL) : 1;
#pragma unroll kUnroll
  for (int u = sub; u < kUnits; u += kLanes) {
    if (u != sub) {
#pragma unroll
      for (int r = 0; r < kRows; r++) W::load(wr[r], u, wu[r]);
    }
#pragma unroll
    for (int t = 0; t < kTokens; t++) {
      typename W::X x;
      W::loadX(xq + u64(min(t0 + t, tokens - 1)) * xqStride, u, x);
#pragma unroll
      for (int r = 0; r < kRows; r++) acc[r][t] = W::dot(wu[r], x, acc[r][t]);
    }
  }
#if JL_LANE_CHAIN
  storeLaneSumsInOrder<kLanes>(acc, sub, r0, t0, rows, tokens, y, bias);
#else
  storeLaneSums<kLanes>(acc, sub, r0, t0, rows, tokens, y, bias);
#endif
}

#ifdef JL_PARTS
// One matrix of a grouped product; `blocks` of the grid's x dimension are its (4 warps each).
struct ProductPart {
  const u8* w;
  u64 rowStride;
  float* y;
  const float* bias;
  int rows;
  int blocks;
};
struct ProductParts {
  ProductPart part[3];
};

template <int kType, int kRows>
JL_DEV void groupPart(const ProductPart& p, int block, const u8* xq, u64 xqStride, int tokens) {
  productWarp<typename IntWeightsOf<kType>::Type, kRows>(block * (blockDim.x >> 5) + (threadIdx.x >> 5), p.w,
                                                         p.rowStride, p.rows, xq, xqStride, tokens, p.y, p.bias);
}

// y_i[t][r] = sum_k w_i[r][k] x[t][k] (+ bias_i[r]) for the JL_PARTS parts. Grid: (the parts'
// blocks together, tokens / JL_TOKENS), 128 threads.
extern "C" __global__ void __launch_bounds__(128)
    matmul_int_group(const ProductParts parts, const u8* __restrict__ xq, u64 xqStride, int tokens) {
  // awaitPreviousKernel() is in productWarp, after the first weight loads.
  int block = blockIdx.x;
  if (block < parts.part[0].blocks) return groupPart<JL_W0, JL_R0>(parts.part[0], block, xq, xqStride, tokens);
  block -= parts.part[0].blocks;
#if JL_PARTS == 3
  if (block >= parts.part[1].blocks)
    return groupPart<JL_W2, JL_R2>(parts.part[2], block - parts.part[1].blocks, xq, xqStride, tokens);
#endif
  groupPart<JL_W1, JL_R1>(parts.part[1], block, xq, xqStride, tokens);
}
#else
// y[t][r] = sum_k w[r][k] x[t][k] (+ bias[r]). Grid: (rows / (4 JL_ROWS kSlots), tokens /
// JL_TOKENS), 128 threads; xq holds `tokens` rows of xqStride bytes.
extern "C" __global__ void __launch_bounds__(128)
    matmul_int(const u8* __restrict__ w, u64 rowStride, int rows, const u8* __restrict__ xq, u64 xqStride, int tokens,
               float* __restrict__ y, const float* __restrict__ bias) {
  // awaitPreviousKernel() is in productWarp, after the first weight loads.
  productWarp<IntWeights, JL_ROWS>(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), w, rowStride, rows, xq,
                                   xqStride, tokens, y, bias);
}
#endif  // JL_PARTS
#endif  // JL_MMA
