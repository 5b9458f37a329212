// Attention of a batch of query tokens over the paged KV cache (kernels/device.h: KvLayout).
//
// Specialised by JL_HD (head dim), JL_GROUP (query heads per block), JL_PAGE_TOKENS and JL_KV_F16
// (fp16 pages, else fp32). A block of 128 threads serves JL_GROUP query heads of one token that
// share a KV head: all of that KV head's (the model's group), so each K/V row is read once for all
// of them - or, when a token has few blocks (decode), fewer: one per query head, so four times the
// blocks share the work (each block reads its KV head's rows, mostly from L2). A head's arithmetic
// is the same either way (nothing in it depends on the other heads of the block), so are its bits.
// Positions go in tiles of kTile through shared memory with an online softmax (running max and
// sum, rescaled per tile). Every sum has a fixed order: dot products run over the head dim in
// order, tile sums are warp butterflies, and each output element accumulates its tile's
// positions in order - the result never depends on timing.
//
// Positions are also cut into chunks of kChunk: each chunk's softmax state starts afresh, and
// the chunks' states are folded together in order (fold()). That fixed structure lets decode -
// one token, a handful of blocks - spread one token's chunks over many blocks (attention_split:
// each block writes a chunk's state, the last to finish folds them) and still give the bits of the
// one-block kernel (attention), which folds the same states in the same order as it goes: a
// token's result does not depend on which kernel ran it, so prefill and decode agree exactly.
//
// Tables: token t's pages are tables[tableOffsets[t] ..] (device addresses); it attends to
// positions 0..positions[t].

#ifndef JL_QTOKENS
#define JL_QTOKENS 1
#endif
constexpr int kHd = JL_HD, kGroup = JL_GROUP, kPageTokens = JL_PAGE_TOKENS;
constexpr int kTile = 4096 / JL_HD > 64 ? 64 : 4096 / JL_HD;  // K and V tiles take 32 KiB together
constexpr int kThreads = 128;
// Prefill: JL_QTOKENS consecutive tokens of one session per block (their rows of queries, token
// by token), so each K/V tile in shared memory serves all of them. Each token still sees only its
// positions, and each of its sums runs in the one-token order (below), so the bits do not change.
constexpr int kQTokens = JL_QTOKENS, kRowsQ = kQTokens * kGroup;  // query rows of a block: row = tt kGroup + g
constexpr int kOwned = (kRowsQ * kHd + kThreads - 1) / kThreads;  // output elements per thread
constexpr int kChunk = 64;                                        // positions; a multiple of kTile
static_assert(kChunk % kTile == 0, "chunks hold whole tiles");
constexpr int kPartialFloats = kGroup * kHd + 2 * kGroup;  // one chunk's state: o, then max and sum per head
// A thread's scores are one position j = tid % kTile for heads tid / kTile + m kScoreRows, and its
// output elements tid + i kThreads all one column d = tid % kHd: K and V elements read once for all.
static_assert(kThreads % kTile == 0 && kThreads % kHd == 0, "threads split evenly over positions and columns");
static_assert(kHd % 4 == 0, "K and q rows are read as float4");
constexpr int kScoreRows = kThreads / kTile, kScoresPerThread = (kRowsQ + kScoreRows - 1) / kScoreRows;
#if JL_KV_F16
typedef u16 KvElement;
JL_DEV float kvLoad(const KvElement* p) { return h2f(__ldg(reinterpret_cast<const unsigned short*>(p))); }
#else
typedef float KvElement;
JL_DEV float kvLoad(const KvElement* p) { return __ldg(p); }
#endif
// A row's elements in 16-byte pieces when a head's row is whole pieces (then every row of a page
// starts 16-byte aligned: pages are, and rows are whole heads apart); else 0 (one by one).
constexpr int kPieceElems = (kHd * int(sizeof(KvElement))) % 16 == 0 ? 16 / int(sizeof(KvElement)) : 0;
constexpr int kPieces = kPieceElems > 0 ? kHd / kPieceElems : 0;
// The piece at p (16-byte aligned) as floats, converted as kvLoad converts one.
JL_DEV void kvLoadPiece(const KvElement* p, float (&out)[kPieceElems > 0 ? kPieceElems : 1]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#if JL_KV_F16
#pragma unroll
  for (int i = 0; i < 4; i++) out[2 * i] = h2f(u16(w[i] & 0xFFFFu)), out[2 * i + 1] = h2f(u16(w[i] >> 16));
#else
#pragma unroll
  for (int i = 0; i < 4; i++) out[i] = __uint_as_float(w[i]);
#endif
}

// Folds a chunk's softmax state (max m, sum l, unnormalised output o) into the running total
// (the first chunk is taken as it is): one order of operations for every kernel here.
JL_DEV void fold(bool first, float m, float l, float o, float& totMax, float& totSum, float& totO) {
  if (first) {
    totMax = m, totSum = l, totO = o;
    return;
  }
  const float now = fmaxf(totMax, m);
  const float a = expf(__fsub_rn(totMax, now)), b = expf(__fsub_rn(m, now));
  totSum = __fadd_rn(__fmul_rn(totSum, a), __fmul_rn(l, b));
  totO = __fadd_rn(__fmul_rn(totO, a), __fmul_rn(o, b));
  totMax = now;
}

// Block `hb` of a token (hb = 0 .. heads / kGroup - 1) serves query heads hb kGroup .. + kGroup - 1,
// of KV head hb kGroup / (heads / kvHeads).
JL_DEV int kvHeadOf(int hb, int heads, int kvHeads) { return hb * kGroup / (heads / kvHeads); }

// out[] = v for output element idx of token t's heads block hb (idx < kGroup kHd), and its integer
// form into xq when given (the product after attention reads it; quantize_x.cuh). Called by all
// threads of the block, each for its owned elements in turn.
JL_DEV void storeOutput(float* out, u8* xq, u64 xqStride, int heads, int t, int hb, int idx, float v) {
  const i64 col = i64(hb) * kGroup * kHd + idx;
  out[i64(t) * heads * kHd + col] = v;
  if constexpr ((kGroup * kHd) % 32 == 0) {  // whole warps own each 32-column block
    if (xq) quantizeBlock32(v, xq + u64(t) * xqStride, heads * kHd, int(col) & ~31);
  }
}

// The chunks [c0, c1) of tokens t0 .. t0 + kQTokens - 1 (n[tt] positions each; 0: no such token)
// for heads block hb. partial == null: folds each token's chunks and writes its normalised output;
// else (one token, one chunk) writes that chunk's state to `partial`.
//
// A token's arithmetic does not depend on the others of the block: each of its rows of scores
// covers its own positions of a tile (count), its max, sum and output sums run over those in the
// one-token order, and a tile or chunk past its end changes nothing of its state (rescale 1, no
// terms, no fold).
JL_DEV void attendChunks(const float* q, float* out, float* partial, int heads, int kvHeads, float scale, int t0,
                         const int (&n)[kQTokens], int hb, int c0, int c1, const u64* pages, u8* xq, u64 xqStride) {
  __shared__ __align__(16) float qs[kRowsQ][kHd];
  // +4: rows stay 16-byte aligned for float4 reads, and the 8 rows a quarter-warp reads at once
  // start 4 banks apart, so they hit different banks.
  __shared__ __align__(16) float ks[kTile][kHd + 4];
  __shared__ __align__(16) float vs[kTile][kHd];
  __shared__ float ps[kRowsQ][kTile];
  __shared__ float runMax[kRowsQ], runSum[kRowsQ], rescale[kRowsQ];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 tokenElems = i64(kvHeads) * kHd;  // one token's K (or V) in a page
  const int kh = kvHeadOf(hb, heads, kvHeads);
  int nMax = 0;
#pragma unroll
  for (int tt = 0; tt < kQTokens; tt++) nMax = max(nMax, n[tt]);

  for (int i = tid; i < kRowsQ * kHd; i += kThreads) {
    const int row = i / kHd, tt = row / kGroup, g = row % kGroup;
    qs[row][i % kHd] = n[tt] > 0 ? q[(i64(t0 + tt) * heads + hb * kGroup + g) * kHd + i % kHd] : 0.0f;
  }
  float o[kOwned], totO[kOwned], totMax[kOwned], totSum[kOwned];
  for (int c = c0; c < c1; c++) {
    __syncthreads();  // the previous chunk's state is read (and qs is written, first time)
    if (tid < kRowsQ) {
      runMax[tid] = -__int_as_float(0x7f800000);
      runSum[tid] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kOwned; i++) o[i] = 0.0f;
    const int end = min(nMax, (c + 1) * kChunk);
    for (int base = c * kChunk; base < end; base += kTile) {
      const int count = min(kTile, end - base);
      __syncthreads();  // the previous tile is consumed (and the state is reset, first time)
      if constexpr (kPieceElems > 0) {
        // 16 bytes of a K row and of its V row per load: a position's page is looked up once per
        // piece instead of once per element (the loads were most of a prefill block's time).
        for (int i = tid; i < count * kPieces; i += kThreads) {
          const int j = i / kPieces, d = (i % kPieces) * kPieceElems, pos = base + j;
          const KvElement* page = reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]);
          const int slot = pos % kPageTokens;
          float k[kPieceElems], v[kPieceElems];
          kvLoadPiece(page + i64(slot) * tokenElems + kh * kHd + d, k);
          kvLoadPiece(page + i64(kPageTokens + slot) * tokenElems + kh * kHd + d, v);
#pragma unroll
          for (int e = 0; e < kPieceElems; e += 4) {
            *reinterpret_cast<float4*>(&ks[j][d + e]) = make_float4(k[e], k[e + 1], k[e + 2], k[e + 3]);
            *reinterpret_cast<float4*>(&vs[j][d + e]) = make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
          }
        }
      } else {
        for (int i = tid; i < count * kHd; i += kThreads) {
          const int j = i / kHd, d = i % kHd, pos = base + j;
          const KvElement* page = reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]);
          const int slot = pos % kPageTokens;
          ks[j][d] = kvLoad(page + i64(slot) * tokenElems + kh * kHd + d);
          vs[j][d] = kvLoad(page + i64(kPageTokens + slot) * tokenElems + kh * kHd + d);
        }
      }
      __syncthreads();
      {  // scores (r, j) for rows r = tid / kTile + m kScoreRows: each K element read once for all of them
        const int j = tid % kTile, r0 = tid / kTile;
        float s[kScoresPerThread] = {};
        if (j < count) {
#pragma unroll 4
          for (int d = 0; d < kHd; d += 4) {  // four at a time, still in order
            const float4 k = *reinterpret_cast<const float4*>(&ks[j][d]);
#pragma unroll
            for (int m = 0; m < kScoresPerThread; m++) {
              if (r0 + m * kScoreRows < kRowsQ) {
                const float4 q = *reinterpret_cast<const float4*>(&qs[r0 + m * kScoreRows][d]);
                s[m] = fmaf(q.x, k.x, s[m]);
                s[m] = fmaf(q.y, k.y, s[m]);
                s[m] = fmaf(q.z, k.z, s[m]);
                s[m] = fmaf(q.w, k.w, s[m]);
              }
            }
          }
        }
#pragma unroll
        for (int m = 0; m < kScoresPerThread; m++) {
          // Past a row's count the score is never read; positions past the tile hold stale K.
          if (r0 + m * kScoreRows < kRowsQ && j < count) ps[r0 + m * kScoreRows][j] = __fmul_rn(s[m], scale);
        }
      }
      __syncthreads();
      for (int r = warp; r < kRowsQ; r += kThreads / 32) {
        const int rowCount = min(kTile, max(0, min(n[r / kGroup], end) - base));
        if (rowCount == 0) {  // the tile is past this token's positions (of this chunk)
          if (lane == 0) rescale[r] = 1.0f;
          continue;
        }
        float m = -__int_as_float(0x7f800000);
        for (int j = lane; j < rowCount; j += 32) m = fmaxf(m, ps[r][j]);
        m = warpMax(m);
        const float before = runMax[r];
        const float now = fmaxf(before, m);
        float sum = 0.0f;
        for (int j = lane; j < rowCount; j += 32) {
          const float p = expf(__fsub_rn(ps[r][j], now));
          ps[r][j] = p;
          sum += p;
        }
        sum = warpSum(sum);
        __syncwarp();  // every lane has read runMax[r] (above) before lane 0 writes it
        if (lane == 0) {
          const float a = expf(__fsub_rn(before, now));  // 0 on the first tile (before = -inf)
          rescale[r] = a;
          runSum[r] = __fadd_rn(__fmul_rn(runSum[r], a), sum);
          runMax[r] = now;
        }
      }
      __syncthreads();
      {  // this thread's output elements share their column d: each V element read once for all
        const int d = tid % kHd;
        int rowCount[kOwned];
#pragma unroll
        for (int i = 0; i < kOwned; i++) {
          const int idx = tid + i * kThreads;
          rowCount[i] = 0;
          if (kOwned * kThreads == kRowsQ * kHd || idx < kRowsQ * kHd) {
            o[i] = __fmul_rn(o[i], rescale[idx / kHd]);
            rowCount[i] = kQTokens == 1 ? count : min(kTile, max(0, min(n[idx / kHd / kGroup], end) - base));
          }
        }
        for (int j = 0; j < count; j++) {
          const float v = vs[j][d];
#pragma unroll
          for (int i = 0; i < kOwned; i++) {
            if (j < rowCount[i]) o[i] = fmaf(ps[(tid + i * kThreads) / kHd][j], v, o[i]);
          }
        }
      }
    }
    __syncthreads();  // runMax / runSum final for this chunk
#pragma unroll
    for (int i = 0; i < kOwned; i++) {
      const int idx = tid + i * kThreads;
      if (kOwned * kThreads == kRowsQ * kHd || idx < kRowsQ * kHd) {
        const int r = idx / kHd;
        if (partial) {
          partial[idx] = o[i];
        } else if (c * kChunk < n[r / kGroup]) {  // the chunk holds positions of this token
          fold(c == c0, runMax[r], runSum[r], o[i], totMax[i], totSum[i], totO[i]);
        }
      }
    }
    if (partial && tid < kGroup) {
      partial[kGroup * kHd + tid] = runMax[tid];
      partial[kGroup * kHd + kGroup + tid] = runSum[tid];
    }
  }
  if (partial) return;
#pragma unroll
  for (int i = 0; i < kOwned; i++) {
    const int idx = tid + i * kThreads;
    if (kOwned * kThreads == kRowsQ * kHd || idx < kRowsQ * kHd) {
      const int tt = idx / (kGroup * kHd);
      // Whole warps share a token when the fused quantization needs them to (kGroup kHd % 32 == 0).
      if (n[tt] > 0) {
        storeOutput(out, xq, xqStride, heads, t0 + tt, hb, idx % (kGroup * kHd),
                    __fmul_rn(totO[i], __frcp_rn(totSum[i])));
      }
    }
  }
}

// Grid (ceil(tokens / kQTokens), heads / kGroup): every chunk of tokens kQTokens x .. in one block.
// With kQTokens > 1 the block's tokens share their page table (the host's choice).
// xq: null, or where the output's integer form goes (rows of xqStride bytes; heads * kHd columns).
extern "C" __global__ void __launch_bounds__(128)
    attention(const float* q, float* out, int heads, int kvHeads, float scale, const int* positions,
              const int* tableOffsets, const u64* tables, u8* xq, u64 xqStride, int tokens) {
  awaitPreviousKernel();
  const int t0 = blockIdx.x * kQTokens;
  int n[kQTokens], nMax = 0;
#pragma unroll
  for (int tt = 0; tt < kQTokens; tt++) {
    n[tt] = t0 + tt < tokens ? positions[t0 + tt] + 1 : 0;
    nMax = max(nMax, n[tt]);
  }
  attendChunks(q, out, nullptr, heads, kvHeads, scale, t0, n, blockIdx.y, 0, (nMax + kChunk - 1) / kChunk,
               tables + tableOffsets[t0], xq, xqStride);
}

// Folds token t's chunk states at `base` (chunk c at base + c * kPartialFloats) in order, as
// attention() does, and writes the output. The states were written by other blocks of this
// kernel: read through L2 (__ldcg), never from a stale L1 line.
JL_DEV void combineChunks(const float* base, float* out, int heads, int t, int hb, int chunks, u8* xq, u64 xqStride) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kOwned; i++) {
    const int idx = tid + i * kThreads;
    if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
      const int g = idx / kHd;
      float totMax = 0, totSum = 0, totO = 0;
      for (int c = 0; c < chunks; c++) {
        const float* p = base + i64(c) * kPartialFloats;
        fold(c == 0, __ldcg(p + kGroup * kHd + g), __ldcg(p + kGroup * kHd + kGroup + g), __ldcg(p + idx), totMax,
             totSum, totO);
      }
      storeOutput(out, xq, xqStride, heads, t, hb, idx, __fmul_rn(totO, __frcp_rn(totSum)));
    }
  }
}

#if JL_QTOKENS == 1
// Decode over a long context, one launch. With B = heads / kGroup blocks per token, grid (tokens,
// B * maxChunks), blockIdx.y = hb + B * chunk: each block writes one chunk's state to
// partials[((t * B + hb) * maxChunks + chunk) * kPartialFloats ..], and the block that completes a
// (token, heads block)'s chunks folds them all in order, as attention() does - so the bits do not
// depend on which block that is. counters[t * B + hb] counts the finished chunks; it is zero before
// the launch and the folding block sets it back to zero (the atomic only counts: no result goes
// through it).
extern "C" __global__ void __launch_bounds__(128)
    attention_split(const float* q, float* partials, unsigned* counters, float* out, int heads, int kvHeads,
                    float scale, const int* positions, const int* tableOffsets, const u64* tables, int maxChunks,
                    u8* xq, u64 xqStride) {
  awaitPreviousKernel();
  __shared__ bool folds;
  const int blocks = heads / kGroup;
  const int t = blockIdx.x, hb = blockIdx.y % blocks, c = blockIdx.y / blocks, n = positions[t] + 1;
  const int chunks = (n + kChunk - 1) / kChunk;
  if (c >= chunks) return;
  float* base = partials + i64(t * blocks + hb) * maxChunks * kPartialFloats;
  const int ns[kQTokens] = {n};
  attendChunks(q, nullptr, base + i64(c) * kPartialFloats, heads, kvHeads, scale, t, ns, hb, c, c + 1,
               tables + tableOffsets[t], nullptr, 0);
  __threadfence();  // this block's state is visible to every block before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = counters + t * blocks + hb;
    folds = atomicAdd(counter, 1u) == unsigned(chunks - 1);
    if (folds) *counter = 0;  // every other block of this (token, head) has counted
  }
  __syncthreads();
  if (!folds) return;
  __threadfence();
  combineChunks(base, out, heads, t, hb, chunks, xq, xqStride);
}
#endif  // JL_QTOKENS == 1
