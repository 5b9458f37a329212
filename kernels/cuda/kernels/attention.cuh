// Attention of a batch of query tokens over the paged KV cache (kernels/device.h: KvLayout).
//
// Specialised by JL_HD (head dim), JL_GROUP (query heads per block), JL_PAGE_TOKENS and JL_KV_F16
// (fp16 pages, else fp32). A block of 128 threads (one per column of heads wider than 128) serves
// JL_GROUP query heads of one token that share a KV head: all of that KV head's (the model's
// group), so each K/V row is read once for all of them - or, when a token has few blocks
// (decode), fewer: one per query head, so four times the blocks share the work (each block reads its KV head's rows, mostly from L2). A head's arithmetic
// is the same either way (nothing in it depends on the other heads of the block), so are its bits.
// Positions go in tiles of kTile through shared memory with an online softmax (running max and
// sum, rescaled per tile). Every sum has a fixed order: a dot product is four running sums over
// the head dim's columns 4i + r, added (0 + 1) + (2 + 3); tile sums are warp butterflies; each
// output element's tile is four running sums over the positions 4i + r, added likewise and then to
// the rescaled output - the result never depends on timing. (Four chains rather than one: a
// decode block is a chain of dependent steps, and these were its longest arithmetic ones.)
//
// Positions are also cut into chunks of kChunk: each chunk's softmax state starts afresh, and
// the chunks' states are folded together in order (fold()). That fixed structure lets decode -
// one token, a handful of blocks - spread one token's chunks over many blocks (attention_split:
// each block writes a chunk's state, the last to finish folds them) and still give the bits of the
// one-block kernel (attention), which folds the same states in the same order as it goes: a
// token's result does not depend on which kernel ran it, so prefill and decode agree exactly.
//
// Tables: token t's pages are tables[tableOffsets[t] ..] (device addresses); it attends to
// positions start..positions[t], where start is 0 or, with a sliding window (window > 0, gemma3's
// local layers), max(0, positions[t] - window + 1) (contextStart). The kernels work in positions
// relative to start - chunks, spans, tiles and the four running sums over a tile's positions all
// begin there - and add start only to find a position's page and row: a token's window has the bits
// of a context holding just those positions (so window 0 keeps its bits), and the entries of pages
// that end before start (freed pages: null) are never read.

constexpr int kHd = JL_HD, kGroup = JL_GROUP, kPageTokens = JL_PAGE_TOKENS;
// JL_ATTN_TIMING=1 (profiling only, through JITLLM_CUDA_DEFINES; docs/cuda.md): attention_split's
// thread 0 stamps the multiprocessor's clock at each phase of its block, and the folding blocks and
// every 97th other block print the intervals (cycles) with printf.
#if JL_ATTN_TIMING
__shared__ long long jlStamps[9];  // [0] unused: the first stamp is taken after the wait
#define JL_STAMP(i) \
  if (threadIdx.x == 0) jlStamps[i] = clock64()
#else
#define JL_STAMP(i)
#endif
constexpr int kTile = 4096 / JL_HD > 64 ? 64 : 4096 / JL_HD;  // K and V tiles take 32 KiB together
// A block's threads: 128, or one per column for heads wider than that (gemma3's 256), since a
// thread's output elements share one column (below). The host launches attentionThreads(hd).
constexpr int kThreads = JL_HD > 128 ? JL_HD : 128;
constexpr int kOwned = (kGroup * kHd + kThreads - 1) / kThreads;  // output elements per thread
constexpr int kChunk = 64;                                        // positions; a multiple of kTile
static_assert(kChunk % kTile == 0, "chunks hold whole tiles");
// JL_SPAN = S > 0 (the host's CudaDeviceOptions::attentionSpan, 2 unless set): chunks fold in two
// levels - each run of S chunks (a span) in order, then the spans in order - which lets decode give
// a block a whole span (attention_spans) and leaves its last block only the spans to fold. For
// contexts of one span (S * 64 positions) that is the one-level fold, bit for bit; past it a
// different order, taken by every kernel of the module alike. 0: the one-level fold.
// (Spans of 2, with the cp.async tiles below, made decode after 4096 tokens ~9 % faster: docs/cuda.md.)
#ifndef JL_SPAN
#define JL_SPAN 0
#endif
constexpr int kSpan = JL_SPAN;
static_assert(kSpan >= 0, "chunks per span");
constexpr int kPartialFloats = kGroup * kHd + 2 * kGroup;  // one chunk's state: o, then max and sum per head
// A thread's scores are one position j = tid % kTile for heads tid / kTile + m kScoreRows, and its
// output elements tid + i kThreads all one column d = tid % kHd: K and V elements read once for all.
static_assert(kThreads % kTile == 0 && kThreads % kHd == 0, "threads split evenly over positions and columns");
static_assert(kHd % 4 == 0, "K and q rows are read as float4");
constexpr int kScoreRows = kThreads / kTile, kScoresPerThread = (kGroup + kScoreRows - 1) / kScoreRows;
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
// A 16-byte piece of a row as floats, converted as kvLoad converts one element.
JL_DEV void kvPieceToFloats(uint4 v, float (&out)[kPieceElems > 0 ? kPieceElems : 1]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#if JL_KV_F16
#pragma unroll
  for (int i = 0; i < 4; i++) out[2 * i] = h2f(u16(w[i] & 0xFFFFu)), out[2 * i + 1] = h2f(u16(w[i] >> 16));
#else
#pragma unroll
  for (int i = 0; i < 4; i++) out[i] = __uint_as_float(w[i]);
#endif
}

typedef float KTile[kTile][kHd + 4];  // +4: see attendChunks
typedef float VTile[kTile][kHd];

// A tile of K and V rows into shared memory, 16 bytes of a K row and of its V row per load (a
// position's page is looked up once per piece, not per element), as floats. A thread's pieces go
// in rounds of kLoadRound whose loads are all issued before any is stored: one trip to memory per
// round instead of one per piece (a decode block is a short chain of such trips, at 6 blocks a
// multiprocessor; a round's registers are what keeps it there). Rows not in whole 16-byte pieces
// are loaded element by element.
template <int kT = kThreads>  // the block's threads
JL_DEV void loadTile(KTile& ks, VTile& vs, const u64* pages, i64 tokenElems, int kh, int base, int count) {
  constexpr int kLoadRound = 4;  // pieces of K and of V a thread has in flight at once
  if constexpr (kPieceElems > 0) {
    const int pieces = count * kPieces;
#pragma unroll 1
    for (int first = threadIdx.x; first < pieces; first += kLoadRound * kT) {
      uint4 k[kLoadRound], v[kLoadRound];
#pragma unroll
      for (int r = 0; r < kLoadRound; r++) {
        const int i = first + r * kT, pos = base + i / kPieces;
        if (i < pieces) {
          const KvElement* row = reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]) +
                                 i64(pos % kPageTokens) * tokenElems + kh * kHd + (i % kPieces) * kPieceElems;
          k[r] = __ldg(reinterpret_cast<const uint4*>(row));
          v[r] = __ldg(reinterpret_cast<const uint4*>(row + i64(kPageTokens) * tokenElems));
        }
      }
#pragma unroll
      for (int r = 0; r < kLoadRound; r++) {
        const int i = first + r * kT;
        if (i < pieces) {
          const int j = i / kPieces, d = (i % kPieces) * kPieceElems;
          float kf[kPieceElems], vf[kPieceElems];
          kvPieceToFloats(k[r], kf);
          kvPieceToFloats(v[r], vf);
#pragma unroll
          for (int e = 0; e < kPieceElems; e += 4) {
            *reinterpret_cast<float4*>(&ks[j][d + e]) = make_float4(kf[e], kf[e + 1], kf[e + 2], kf[e + 3]);
            *reinterpret_cast<float4*>(&vs[j][d + e]) = make_float4(vf[e], vf[e + 1], vf[e + 2], vf[e + 3]);
          }
        }
      }
    }
  } else {
    for (int i = threadIdx.x; i < count * kHd; i += kT) {
      const int j = i / kHd, d = i % kHd, pos = base + j;
      const KvElement* row =
          reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]) + i64(pos % kPageTokens) * tokenElems + kh * kHd;
      ks[j][d] = kvLoad(row + d);
      vs[j][d] = kvLoad(row + i64(kPageTokens) * tokenElems + d);
    }
  }
}

// JL_ATTN_PREFETCH=1 (the default; JITLLM_CUDA_DEFINES=JL_ATTN_PREFETCH=0 turns it off): fp32 tiles
// arrive by cp.async, each one requested while the tile before it is still being computed - the
// next K tile once this tile's scores are done, the next V tile once its outputs are - so a block
// with several tiles (prefill, the 3B's 32-position tiles, several chunks) waits for memory once
// rather than once a tile. The same data in the same places, so the same bits. Needs sm_80's
// cp.async; fp16 pages (converted on the way in) and older GPUs keep loadTile.
#ifndef JL_ATTN_PREFETCH
#define JL_ATTN_PREFETCH 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr bool kAsyncTiles = JL_ATTN_PREFETCH && kPieceElems == 4 && !JL_KV_F16;
#else
constexpr bool kAsyncTiles = false;
#endif
// Requests the K (vOffset 0) or V (vOffset = a page's K part) rows of positions base .. base +
// count - 1 into `tile` as one cp.async group of this thread's pieces.
template <typename Tile, int kT = kThreads>  // kT: the block's threads
JL_DEV void requestTile(Tile& tile, const u64* pages, i64 tokenElems, i64 vOffset, int kh, int base, int count) {
  const int pieces = count * kPieces;
  for (int i = threadIdx.x; i < pieces; i += kT) {
    const int pos = base + i / kPieces;
    const KvElement* row = reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]) +
                           i64(pos % kPageTokens) * tokenElems + vOffset + kh * kHd + (i % kPieces) * kPieceElems;
    copyAsync16(sharedAddress(&tile[i / kPieces][(i % kPieces) * kPieceElems]), row);
  }
  commitCopies();
}

// Folds a chunk's softmax state (max m, sum l, unnormalised output o) into the running total
// (the first chunk is taken as it is): one order of operations for every kernel here. In two
// parts, so that a run of folds can take its exponentials off the chain (combineChunks): the
// running maximum alone decides them.
JL_DEV void foldFactors(float totMax, float m, float& now, float& a, float& b) {
  now = fmaxf(totMax, m);
  a = expf(__fsub_rn(totMax, now)), b = expf(__fsub_rn(m, now));
}
JL_DEV void foldScaled(float a, float b, float l, float o, float& totSum, float& totO) {
  totSum = __fadd_rn(__fmul_rn(totSum, a), __fmul_rn(l, b));
  totO = __fadd_rn(__fmul_rn(totO, a), __fmul_rn(o, b));
}
JL_DEV void fold(bool first, float m, float l, float o, float& totMax, float& totSum, float& totO) {
  if (first) {
    totMax = m, totSum = l, totO = o;
    return;
  }
  float a, b;
  foldFactors(totMax, m, totMax, a, b);
  foldScaled(a, b, l, o, totSum, totO);
}

// One state of JL_SPAN's two-level fold: into its span's state (taken as it is when it opens the
// span), and the span into the total once the state closes it (taken as it is when it is the first
// span). attendChunks and combineInSpans both fold through it, so both keep one order.
JL_DEV void foldInSpan(bool opensSpan, bool closesSpan, bool firstSpan, float m, float l, float o, float& spanMax,
                       float& spanSum, float& spanO, float& totMax, float& totSum, float& totO) {
  fold(opensSpan, m, l, o, spanMax, spanSum, spanO);
  if (closesSpan) fold(firstSpan, spanMax, spanSum, spanO, totMax, totSum, totO);
}

// fold() and foldInSpan() for the elements of one head's row, which share its maximum and sum: the
// row's scalars once (foldRow), then each element (foldElement) - fold()'s operations on fold()'s
// operands, so its bits.
struct FoldFactors {
  bool first;
  float a, b;
};
JL_DEV FoldFactors foldRow(bool first, float m, float l, float& totMax, float& totSum) {
  FoldFactors f{first, 0.0f, 0.0f};
  if (first) {
    totMax = m, totSum = l;
    return f;
  }
  foldFactors(totMax, m, totMax, f.a, f.b);
  totSum = __fadd_rn(__fmul_rn(totSum, f.a), __fmul_rn(l, f.b));
  return f;
}
JL_DEV void foldElement(const FoldFactors& f, float o, float& totO) {
  totO = f.first ? o : __fadd_rn(__fmul_rn(totO, f.a), __fmul_rn(o, f.b));
}

// The first position a token at `position` attends to (see the top of the file).
JL_DEV int contextStart(int position, int window) { return window > 0 ? max(0, position - window + 1) : 0; }

// Block `hb` of a token (hb = 0 .. heads / kGroup - 1) serves query heads hb kGroup .. + kGroup - 1,
// of KV head hb kGroup / (heads / kvHeads).
JL_DEV int kvHeadOf(int hb, int heads, int kvHeads) { return hb * kGroup / (heads / kvHeads); }

// out[] = v for output element idx of token t's heads block hb, and its integer form into xq when
// given (the product after attention reads it; quantize_x.cuh). Called by all threads of the
// block, each for its owned elements in turn.
JL_DEV void storeOutput(float* out, u8* xq, u64 xqStride, int heads, int t, int hb, int idx, float v) {
  const i64 col = i64(hb) * kGroup * kHd + idx;
  out[i64(t) * heads * kHd + col] = v;
  if constexpr ((kGroup * kHd) % 32 == 0) {  // whole warps own each 32-column block
    if (xq) quantizeBlock32(v, xq + u64(t) * xqStride, heads * kHd, int(col) & ~31);
  }
}

// The chunks [c0, c1) of token t for heads block hb, over the n positions from `start` (chunk c:
// start + c kChunk ..). partial == null: folds them and writes the normalised output; else (one
// chunk) writes that chunk's state to `partial`.
JL_DEV void attendChunks(const float* q, float* out, float* partial, int heads, int kvHeads, float scale, int t, int hb,
                         int n, int start, int c0, int c1, const u64* pages, u8* xq, u64 xqStride) {
  __shared__ __align__(16) float qs[kGroup][kHd];
  // +4: rows stay 16-byte aligned for float4 reads, and the 8 rows a quarter-warp reads at once
  // start 4 banks apart, so they hit different banks.
  __shared__ __align__(16) KTile ks;
  __shared__ __align__(16) VTile vs;
  __shared__ float ps[kGroup][kTile];
  __shared__ float runMax[kGroup], runSum[kGroup], rescale[kGroup];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 tokenElems = i64(kvHeads) * kHd;  // one token's K (or V) in a page
  const int kh = kvHeadOf(hb, heads, kvHeads);

  for (int i = tid; i < kGroup * kHd; i += kThreads) {
    qs[i / kHd][i % kHd] = q[(i64(t) * heads + hb * kGroup + i / kHd) * kHd + i % kHd];
  }
  float o[kOwned], totO[kOwned], totMax[kOwned], totSum[kOwned];
  float spanO[kSpan > 0 ? kOwned : 1], spanMax[kSpan > 0 ? kOwned : 1], spanSum[kSpan > 0 ? kOwned : 1];
  const int last = min(n, c1 * kChunk);               // the block's positions end here
  const i64 vOffset = i64(kPageTokens) * tokenElems;  // a page's V rows after its K rows
  if constexpr (kAsyncTiles) {                        // the block's first tile: K, then V
    const int first = c0 * kChunk, count = min(kTile, last - first);
    requestTile(ks, pages, tokenElems, 0, kh, start + first, count);
    requestTile(vs, pages, tokenElems, vOffset, kh, start + first, count);
  }
  for (int c = c0; c < c1; c++) {
    __syncthreads();  // the previous chunk's state is read (and qs is written, first time)
    JL_STAMP(2);
    if (tid < kGroup) {
      runMax[tid] = -__int_as_float(0x7f800000);
      runSum[tid] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kOwned; i++) o[i] = 0.0f;
    const int end = min(n, (c + 1) * kChunk);
    for (int base = c * kChunk; base < end; base += kTile) {
      const int count = min(kTile, end - base);
      const int next = base + kTile, nextCount = min(kTile, last - next);  // the tile after, if any
      if constexpr (kAsyncTiles) {
        awaitCopies<1>();  // this tile's K is here (its V may still be on the way)
        __syncthreads();   // everyone's pieces of it (and the state is reset, first time)
      } else {
        __syncthreads();  // the previous tile is consumed (and the state is reset, first time)
        loadTile(ks, vs, pages, tokenElems, kh, start + base, count);
        __syncthreads();
      }
      JL_STAMP(3);
      {  // scores (g, j) for g = tid / kTile + m kScoreRows: each K element read once for all of them
        const int j = tid % kTile, g0 = tid / kTile;
        if (j < count) {
          // Four sums per score, over the columns d = 4i + r (r = 0..3), then added as (0 + 1) + (2 + 3):
          // four independent chains of kHd / 4 steps instead of one of kHd.
          float s4[kScoresPerThread][4] = {};
#pragma unroll 4
          for (int d = 0; d < kHd; d += 4) {
            const float4 k = *reinterpret_cast<const float4*>(&ks[j][d]);
#pragma unroll
            for (int m = 0; m < kScoresPerThread; m++) {
              if (g0 + m * kScoreRows < kGroup) {
                const float4 q = *reinterpret_cast<const float4*>(&qs[g0 + m * kScoreRows][d]);
                s4[m][0] = fmaf(q.x, k.x, s4[m][0]);
                s4[m][1] = fmaf(q.y, k.y, s4[m][1]);
                s4[m][2] = fmaf(q.z, k.z, s4[m][2]);
                s4[m][3] = fmaf(q.w, k.w, s4[m][3]);
              }
            }
          }
          float s[kScoresPerThread];
#pragma unroll
          for (int m = 0; m < kScoresPerThread; m++) {
            s[m] = __fadd_rn(__fadd_rn(s4[m][0], s4[m][1]), __fadd_rn(s4[m][2], s4[m][3]));
          }
#pragma unroll
          for (int m = 0; m < kScoresPerThread; m++) {
            if (g0 + m * kScoreRows < kGroup) ps[g0 + m * kScoreRows][j] = __fmul_rn(s[m], scale);
          }
        }
      }
      __syncthreads();
      JL_STAMP(4);
      if constexpr (kAsyncTiles) {  // the scores have read this K tile: the next one may come in
        if (nextCount > 0) requestTile(ks, pages, tokenElems, 0, kh, start + next, nextCount);
      }
      for (int g = warp; g < kGroup; g += kThreads / 32) {
        float m = -__int_as_float(0x7f800000);
        for (int j = lane; j < count; j += 32) m = fmaxf(m, ps[g][j]);
        m = warpMax(m);
        const float before = runMax[g];
        const float now = fmaxf(before, m);
        float sum = 0.0f;
        for (int j = lane; j < count; j += 32) {
          const float p = expf(__fsub_rn(ps[g][j], now));
          ps[g][j] = p;
          sum += p;
        }
        sum = warpSum(sum);
        __syncwarp();  // every lane has read runMax[g] (above) before lane 0 writes it
        if (lane == 0) {
          const float a = expf(__fsub_rn(before, now));  // 0 on the first tile (before = -inf)
          rescale[g] = a;
          runSum[g] = __fadd_rn(__fmul_rn(runSum[g], a), sum);
          runMax[g] = now;
        }
      }
      if constexpr (kAsyncTiles) {  // this tile's V (the next K may still be on the way)
        if (nextCount > 0) {
          awaitCopies<1>();
        } else {
          awaitCopies<0>();
        }
      }
      __syncthreads();
      JL_STAMP(5);
      {  // this thread's output elements share their column d: each V element read once for all
        const int d = tid % kHd;
        // Four sums per element, over the positions j = 4i + r, added as (0 + 1) + (2 + 3) and then
        // to the rescaled running output: four independent chains instead of one.
        float u[kOwned][4] = {};
#pragma unroll 2
        for (int j = 0; j < count; j += 4) {
#pragma unroll
          for (int r = 0; r < 4; r++) {
            if (j + r < count) {
              const float v = vs[j + r][d];
#pragma unroll
              for (int i = 0; i < kOwned; i++) {
                const int idx = tid + i * kThreads;
                if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
                  u[i][r] = fmaf(ps[idx / kHd][j + r], v, u[i][r]);
                }
              }
            }
          }
        }
#pragma unroll
        for (int i = 0; i < kOwned; i++) {
          const int idx = tid + i * kThreads;
          if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
            o[i] = __fadd_rn(__fmul_rn(o[i], rescale[idx / kHd]),
                             __fadd_rn(__fadd_rn(u[i][0], u[i][1]), __fadd_rn(u[i][2], u[i][3])));
          }
        }
      }
      if constexpr (kAsyncTiles) {
        __syncthreads();  // the outputs have read this V tile: the next one may come in
        if (nextCount > 0) requestTile(vs, pages, tokenElems, vOffset, kh, start + next, nextCount);
      }
    }
    __syncthreads();  // runMax / runSum final for this chunk
    JL_STAMP(6);
    if constexpr (kSpan == 0) {
#pragma unroll
      for (int i = 0; i < kOwned; i++) {
        const int idx = tid + i * kThreads;
        if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
          const int g = idx / kHd;
          if (partial) {
            partial[idx] = o[i];
          } else {
            fold(c == c0, runMax[g], runSum[g], o[i], totMax[i], totSum[i], totO[i]);
          }
        }
      }
      if (partial && tid < kGroup) {
        partial[kGroup * kHd + tid] = runMax[tid];
        partial[kGroup * kHd + kGroup + tid] = runSum[tid];
      }
    } else {
      // Into its span's state; the whole context in one block (partial null) folds each span into
      // the total as it ends. A block of part of the context holds one span or one chunk of it
      // (c0 starts it either way), whose state it writes below.
#pragma unroll
      for (int i = 0; i < kOwned; i++) {
        const int idx = tid + i * kThreads;
        if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
          const int g = idx / kHd;
          foldInSpan(c == c0 || c % kSpan == 0, !partial && (c % kSpan == kSpan - 1 || c == c1 - 1), c < kSpan,
                     runMax[g], runSum[g], o[i], spanMax[i], spanSum[i], spanO[i], totMax[i], totSum[i], totO[i]);
        }
      }
    }
  }
  if constexpr (kSpan > 0) {
    if (partial) {
#pragma unroll
      for (int i = 0; i < kOwned; i++) {
        const int idx = tid + i * kThreads;
        if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
          partial[idx] = spanO[i];
          if (idx % kHd == 0) {  // one thread per head writes its maximum and sum
            partial[kGroup * kHd + idx / kHd] = spanMax[i];
            partial[kGroup * kHd + kGroup + idx / kHd] = spanSum[i];
          }
        }
      }
    }
  }
  if (partial) return;
#pragma unroll
  for (int i = 0; i < kOwned; i++) {
    const int idx = tid + i * kThreads;
    if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
      storeOutput(out, xq, xqStride, heads, t, hb, idx, __fmul_rn(totO[i], __frcp_rn(totSum[i])));
    }
  }
}

// Grid (tokens, heads / kGroup): every chunk of token t in one block.
// xq: null, or where the output's integer form goes (rows of xqStride bytes; heads * kHd columns).
// window: the sliding window (contextStart), 0 for none.
extern "C" __global__ void __launch_bounds__(kThreads)
    attention(const float* q, float* out, int heads, int kvHeads, float scale, const int* positions,
              const int* tableOffsets, const u64* tables, u8* xq, u64 xqStride, int window) {
  awaitPreviousKernel();
  const int t = blockIdx.x, start = contextStart(positions[t], window), n = positions[t] + 1 - start;
  attendChunks(q, out, nullptr, heads, kvHeads, scale, t, blockIdx.y, n, start, 0, (n + kChunk - 1) / kChunk,
               tables + tableOffsets[t], xq, xqStride);
}

// Prefill: attention_rows, a block per JL_QTOKENS tokens of one session and KV head (all kGroup of
// its query heads: kRows query rows, token by token). Each K/V tile in shared memory serves every
// row, and the work is tiled over the block's threads in two dimensions - a thread's scores are
// kScoreRowsPer rows x kScorePos positions, its outputs kOutRowsPer rows x 4 columns - so a K or V
// element read from shared memory feeds several rows' sums (the one-token blocks above read each
// once per score or output; prefill attention ran at ~6 TFLOP/s). Every (row, position) and (row,
// column) takes the operations of attendChunks in its order: the same four running sums per score,
// the same softmax (its warp's lanes and butterfly, eight threads a row here), the same four running sums
// per output over the tile's positions, the same per-chunk states folded as the one-block kernel
// folds them (foldRow/foldElement, in spans with JL_SPAN). A row takes part in a tile only as far
// as its own context goes (rows of one block end at different positions), so its bits are the
// one-token kernel's, and prefill still agrees with decode exactly. Needs the page table of one
// session for all of the block's tokens (the host checks) and dynamic shared memory
// (attentionRowsSharedBytes, kernel_library.cc, computes the same size). It has no sliding window:
// the rows of a block share tiles of absolute positions, while a window's chunks and tiles begin at
// each token's own start, so the host takes the one-token kernel for a batch where any token's
// window has moved past position 0 (before that a window changes nothing).
#ifndef JL_QTOKENS
#define JL_QTOKENS 8
#endif
constexpr int kQTokens = JL_QTOKENS;
// (512 threads for heads of 128 columns - fewer registers a thread, no spills - took the 3B shape's
// layer 17 % longer than 256.)
constexpr int kRowThreads = 256;
constexpr bool kRowsSupported = kQTokens > 0 && kRowThreads % (kHd / 4) == 0 && kTile % 16 == 0;
#if JL_QTOKENS > 0
constexpr int kRows = kQTokens * kGroup;  // row tk * kGroup + g: token tk's query head g of the KV head
constexpr int kScorePosThreads = 16, kScoreRowThreads = kRowThreads / kScorePosThreads;
constexpr int kScorePos = kTile / kScorePosThreads;                               // positions pj + 16 n
constexpr int kScoreRowsPer = (kRows + kScoreRowThreads - 1) / kScoreRowThreads;  // rows pr + 16 m (256 threads)
constexpr int kOutColThreads = kHd / 4, kOutRowThreads = kRowThreads / (kOutColThreads > 0 ? kOutColThreads : 1);
constexpr int kOutRowsPer = (kRows + kOutRowThreads - 1) / kOutRowThreads;  // rows or + kOutRowThreads m
constexpr int kPStride = kTile + 16;  // a score row; 16 floats more: the two rows a warp writes hit other banks
// Dynamic shared memory (floats): qs[kRows][kHd] | ks: KTile[2] | vs: VTile[2] | ps[kRows][kPStride]
// | runMax, runSum, rescale [kRows] | (ints) contexts, counts [kRows]. Two K/V tiles: with
// kAsyncTiles the next tile comes in (cp.async) while this one is computed - a block has an SM to
// itself or shares it with one other, so a tile loaded in between would leave it mostly idle for
// the trip to memory; else the second is unused.
constexpr int kRowsQs = 0, kRowsKs = kRowsQs + kRows * kHd, kRowsVs = kRowsKs + 2 * kTile * (kHd + 4),
              kRowsPs = kRowsVs + 2 * kTile * kHd, kRowsState = kRowsPs + kRows * kPStride,
              kRowsSharedFloats = kRowsState + 5 * kRows;
// Blocks an SM attention_rows' registers are fitted to: two where a block's rows x columns are
// few enough to take no spills at 128 registers (the 1B shape's 32 x 64: a tenth less time a layer
// than at one block), else one. JL_ROWS_MIN_BLOCKS sets it (a tuning define).
#ifdef JL_ROWS_MIN_BLOCKS
constexpr int kRowsMinBlocks = JL_ROWS_MIN_BLOCKS;
#else
constexpr int kRowsMinBlocks = kRows * kHd <= 2048 ? 2 : 1;
#endif

// requestTile for attention_rows: K and V of positions base .. base + count - 1 as one cp.async
// group, each piece's page looked up once for its K and its V, all of a thread's lookups issued
// before its copies (one trip to memory for them, not one a piece).
template <int kT = kRowThreads>  // the block's threads (a template: only modules with whole pieces use it)
JL_DEV void requestRowsTile(KTile& ks, VTile& vs, const u64* pages, i64 tokenElems, int kh, int base, int count) {
  constexpr int kPerThread = (kTile * kPieces + kT - 1) / kT;
  const int pieces = count * kPieces;
  const KvElement* from[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; k++) {
    const int i = threadIdx.x + k * kT, pos = base + i / kPieces;
    from[k] = nullptr;
    if (i < pieces) {
      from[k] = reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]) + i64(pos % kPageTokens) * tokenElems +
                kh * kHd + (i % kPieces) * kPieceElems;
    }
  }
  const i64 vOffset = i64(kPageTokens) * tokenElems;  // a page's V rows after its K rows
#pragma unroll
  for (int k = 0; k < kPerThread; k++) {
    const int i = threadIdx.x + k * kT;
    if (i < pieces) {
      copyAsync16(sharedAddress(&ks[i / kPieces][(i % kPieces) * kPieceElems]), from[k]);
      copyAsync16(sharedAddress(&vs[i / kPieces][(i % kPieces) * kPieceElems]), from[k] + vOffset);
    }
  }
  commitCopies();
}

// Grid (ceil(tokens / kQTokens), kvHeads), kRowThreads threads, kRowsSharedFloats * 4 bytes of
// dynamic shared memory. xq: null, or where the output's integer form goes (as attention()).
extern "C" __global__ void __launch_bounds__(kRowThreads, kRowsMinBlocks)
    attention_rows(const float* q, float* out, int heads, int kvHeads, float scale, const int* positions,
                   const int* tableOffsets, const u64* tables, u8* xq, u64 xqStride, int tokens) {
  awaitPreviousKernel();
  if (blockDim.x != kRowThreads) __trap();  // kAttentionRowThreads on the host
  if constexpr (!kRowsSupported) {
    __trap();  // the host never picks it then
  } else {
    extern __shared__ __align__(16) float rowsShared[];
    {
      u32 have;
      asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
      if (have < u32(kRowsSharedFloats * 4)) __trap();
    }
    float(*qs)[kHd] = reinterpret_cast<float(*)[kHd]>(rowsShared + kRowsQs);
    KTile* kTiles = reinterpret_cast<KTile*>(rowsShared + kRowsKs);
    VTile* vTiles = reinterpret_cast<VTile*>(rowsShared + kRowsVs);
    float(*ps)[kPStride] = reinterpret_cast<float(*)[kPStride]>(rowsShared + kRowsPs);
    float* runMax = rowsShared + kRowsState;
    float* runSum = runMax + kRows;
    float* rescale = runSum + kRows;
    int* contexts = reinterpret_cast<int*>(rescale + kRows);  // positions + 1; 0 past the batch
    int* counts = contexts + kRows;                           // a row's positions in this tile

    const int tid = threadIdx.x;
    const int t0 = blockIdx.x * kQTokens, kh = blockIdx.y;
    const u64* pages = tables + tableOffsets[t0];
    const i64 tokenElems = i64(kvHeads) * kHd;
    {  // the queries, 16 bytes a piece, every load issued before any store (one trip to memory)
      constexpr int kPiecesPerRow = kHd / 4, kQPieces = kRows * kPiecesPerRow;
      constexpr int kPerThread = (kQPieces + kRowThreads - 1) / kRowThreads;
      float4 piece[kPerThread];
#pragma unroll
      for (int k = 0; k < kPerThread; k++) {
        const int i = tid + k * kRowThreads, row = i / kPiecesPerRow, t = t0 + row / kGroup;
        piece[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < kQPieces && t < tokens) {
          piece[k] = *(reinterpret_cast<const float4*>(q + (i64(t) * heads + kh * kGroup + row % kGroup) * kHd) +
                       i % kPiecesPerRow);
        }
      }
#pragma unroll
      for (int k = 0; k < kPerThread; k++) {
        const int i = tid + k * kRowThreads;
        if (i < kQPieces) *reinterpret_cast<float4*>(&qs[i / kPiecesPerRow][4 * (i % kPiecesPerRow)]) = piece[k];
      }
    }
    for (int r = tid; r < kRows; r += kRowThreads) {
      contexts[r] = t0 + r / kGroup < tokens ? positions[t0 + r / kGroup] + 1 : 0;
    }
    __syncthreads();
    int longest = 0;
    for (int r = 0; r < kRows; r++) longest = max(longest, contexts[r]);

    // This thread's outputs: rows orow + kOutRowThreads m, columns oc .. oc + 3.
    const int oc = (tid % kOutColThreads) * 4, orow = tid / kOutColThreads;
    // (Every row of the batch takes part in chunk 0, whose fold sets the totals: the zeros below are
    // never read.)
    float o[kOutRowsPer][4], totO[kOutRowsPer][4] = {}, totMax[kOutRowsPer] = {}, totSum[kOutRowsPer] = {};
    float spanO[kSpan > 0 ? kOutRowsPer : 1][4] = {}, spanMax[kOutRowsPer] = {}, spanSum[kOutRowsPer] = {};
    const int chunks = (longest + kChunk - 1) / kChunk;
    // Tiles go base = 0, kTile, ... up to the longest context (chunk ends fall on tile ends); tile
    // number b in kTiles[b % 2], vTiles[b % 2].
    int buffer = 0;
    if constexpr (kAsyncTiles) {
      requestRowsTile(kTiles[0], vTiles[0], pages, tokenElems, kh, 0, min(kTile, longest));
    }
    for (int c = 0; c < chunks; c++) {
      __syncthreads();  // the previous chunk's state is read
      for (int r = tid; r < kRows; r += kRowThreads) {
        runMax[r] = -__int_as_float(0x7f800000);
        runSum[r] = 0.0f;
      }
#pragma unroll
      for (int m = 0; m < kOutRowsPer; m++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[m][e] = 0.0f;
      const int chunkEnd = min(longest, (c + 1) * kChunk);
      for (int base = c * kChunk; base < chunkEnd; base += kTile) {
        const int count = min(kTile, chunkEnd - base);
        KTile& ks = kTiles[buffer];
        VTile& vs = vTiles[buffer];
        if constexpr (kAsyncTiles) {
          awaitCopies<0>();  // this tile (the only copies in flight)
          __syncthreads();   // ... for every thread; the previous tile is consumed (and the state reset)
          const int next = base + kTile;
          if (next < longest) {
            requestRowsTile(kTiles[buffer ^ 1], vTiles[buffer ^ 1], pages, tokenElems, kh, next,
                            min(kTile, longest - next));
          }
        } else {
          __syncthreads();  // the previous tile is consumed (and the state reset, first time)
          loadTile<kRowThreads>(ks, vs, pages, tokenElems, kh, base, count);
          __syncthreads();
        }
        buffer ^= 1;
        {  // scores: rows pr + kScoreRowThreads m, positions pj + 16 n; attendChunks' four sums each
          const int pj = tid % kScorePosThreads, pr = tid / kScorePosThreads;
          float s4[kScoreRowsPer][kScorePos][4] = {};
#pragma unroll 2
          for (int d = 0; d < kHd; d += 4) {
            float4 k[kScorePos];
#pragma unroll
            for (int n = 0; n < kScorePos; n++) k[n] = *reinterpret_cast<const float4*>(&ks[pj + 16 * n][d]);
#pragma unroll
            for (int m = 0; m < kScoreRowsPer; m++) {
              if (kRows % kScoreRowThreads == 0 || pr + kScoreRowThreads * m < kRows) {
                const float4 qv = *reinterpret_cast<const float4*>(&qs[pr + kScoreRowThreads * m][d]);
#pragma unroll
                for (int n = 0; n < kScorePos; n++) {
                  s4[m][n][0] = fmaf(qv.x, k[n].x, s4[m][n][0]);
                  s4[m][n][1] = fmaf(qv.y, k[n].y, s4[m][n][1]);
                  s4[m][n][2] = fmaf(qv.z, k[n].z, s4[m][n][2]);
                  s4[m][n][3] = fmaf(qv.w, k[n].w, s4[m][n][3]);
                }
              }
            }
          }
#pragma unroll
          for (int m = 0; m < kScoreRowsPer; m++) {
            const int row = pr + kScoreRowThreads * m;
#pragma unroll
            for (int n = 0; n < kScorePos; n++) {
              const int j = pj + 16 * n;
              if ((kRows % kScoreRowThreads == 0 || row < kRows) && j < count) {
                const float s = __fadd_rn(__fadd_rn(s4[m][n][0], s4[m][n][1]), __fadd_rn(s4[m][n][2], s4[m][n][3]));
                ps[row][j] = __fmul_rn(s, scale);
              }
            }
          }
        }
        __syncthreads();
        // The softmax over each row's own positions of the tile, eight threads a row (all rows at
        // once rather than a warp a row in turn): thread i of a row takes what lanes i, i + 8, i + 16
        // and i + 24 of attendChunks' warp take (positions l and l + 32 of lane l), adds them as
        // that warp's first two butterfly steps do (xor 16, then 8: within the thread), and the
        // last three steps (xor 4, 2, 1) shuffle between the eight - the same sums in the same tree.
#pragma unroll 1
        for (int row0 = 0; row0 < kRows; row0 += kRowThreads / 8) {
          const int row = row0 + tid / 8, i = tid % 8;
          const int n = row < kRows ? contexts[row] : 0;
          const int rowCount = base < n ? min(kTile, min(n, (c + 1) * kChunk) - base) : 0;
          if (i == 0 && row < kRows) counts[row] = rowCount;
          float* pr = ps[row < kRows ? row : 0];
          float m = -__int_as_float(0x7f800000);
#pragma unroll
          for (int k = 0; k < 8; k++) {  // lane i + 8 (k % 4), position + 32 (k / 4)
            const int j = i + 8 * (k % 4) + 32 * (k / 4);
            if (j < rowCount) m = fmaxf(m, pr[j]);
          }
#pragma unroll
          for (int off = 4; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
          const float before = rowCount > 0 ? runMax[row] : 0.0f;
          const float now = fmaxf(before, m);
          float lanes[4];
#pragma unroll
          for (int k = 0; k < 4; k++) {
            lanes[k] = 0.0f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
              const int j = i + 8 * k + 32 * h;
              if (j < rowCount) {
                const float p = expf(__fsub_rn(pr[j], now));
                pr[j] = p;
                lanes[k] += p;
              }
            }
          }
          float sum = __fadd_rn(__fadd_rn(lanes[0], lanes[2]), __fadd_rn(lanes[1], lanes[3]));
#pragma unroll
          for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
          __syncwarp();  // the row's eight threads have read runMax[row]
          if (i == 0 && rowCount > 0) {
            const float a = expf(__fsub_rn(before, now));
            rescale[row] = a;
            runSum[row] = __fadd_rn(__fmul_rn(runSum[row], a), sum);
            runMax[row] = now;
          }
        }
        __syncthreads();
        {  // outputs: rows orow + kOutRowThreads m, columns oc ..; attendChunks' four sums each
          int rowCount[kOutRowsPer];
          bool whole = count % 4 == 0;  // every row of this thread takes all `count` positions
#pragma unroll
          for (int m = 0; m < kOutRowsPer; m++) {
            const int row = orow + kOutRowThreads * m;
            rowCount[m] = kRows % kOutRowThreads == 0 || row < kRows ? counts[row] : 0;
            whole = whole && rowCount[m] == count;
          }
          float u[kOutRowsPer][4][4] = {};  // [row][column][positions 4i + r]
          if (whole) {                      // (the diagonal and the context's last tile take the loop below)
#pragma unroll 2
            for (int j = 0; j < count; j += 4) {
              float4 v[4];
#pragma unroll
              for (int r = 0; r < 4; r++) v[r] = *reinterpret_cast<const float4*>(&vs[j + r][oc]);
#pragma unroll
              for (int m = 0; m < kOutRowsPer; m++) {
                const float4 p4 = *reinterpret_cast<const float4*>(&ps[orow + kOutRowThreads * m][j]);
                const float p[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
                for (int r = 0; r < 4; r++) {
                  u[m][0][r] = fmaf(p[r], v[r].x, u[m][0][r]);
                  u[m][1][r] = fmaf(p[r], v[r].y, u[m][1][r]);
                  u[m][2][r] = fmaf(p[r], v[r].z, u[m][2][r]);
                  u[m][3][r] = fmaf(p[r], v[r].w, u[m][3][r]);
                }
              }
            }
          } else {
#pragma unroll 1
            for (int j = 0; j < count; j += 4) {
#pragma unroll
              for (int r = 0; r < 4; r++) {
                if (j + r < count) {
                  const float4 v = *reinterpret_cast<const float4*>(&vs[j + r][oc]);
#pragma unroll
                  for (int m = 0; m < kOutRowsPer; m++) {
                    if (j + r < rowCount[m]) {
                      const float p = ps[orow + kOutRowThreads * m][j + r];
                      u[m][0][r] = fmaf(p, v.x, u[m][0][r]);
                      u[m][1][r] = fmaf(p, v.y, u[m][1][r]);
                      u[m][2][r] = fmaf(p, v.z, u[m][2][r]);
                      u[m][3][r] = fmaf(p, v.w, u[m][3][r]);
                    }
                  }
                }
              }
            }
          }
#pragma unroll
          for (int m = 0; m < kOutRowsPer; m++) {
            if (rowCount[m] > 0) {
              const float a = rescale[orow + kOutRowThreads * m];
#pragma unroll
              for (int e = 0; e < 4; e++) {
                o[m][e] = __fadd_rn(__fmul_rn(o[m][e], a),
                                    __fadd_rn(__fadd_rn(u[m][e][0], u[m][e][1]), __fadd_rn(u[m][e][2], u[m][e][3])));
              }
            }
          }
        }
      }
      __syncthreads();  // runMax / runSum final for this chunk

      // The chunk's state into each row's total (rows whose context reaches the chunk), as
      // attendChunks folds it for a token whose chunks are [0, rowChunks).
#pragma unroll
      for (int m = 0; m < kOutRowsPer; m++) {
        const int row = orow + kOutRowThreads * m;
        if ((kRows % kOutRowThreads == 0 || row < kRows) && c * kChunk < contexts[row]) {
          const float rm = runMax[row], rl = runSum[row];
          if constexpr (kSpan == 0) {
            const FoldFactors f = foldRow(c == 0, rm, rl, totMax[m], totSum[m]);
#pragma unroll
            for (int e = 0; e < 4; e++) foldElement(f, o[m][e], totO[m][e]);
          } else {
            const int rowChunks = (contexts[row] + kChunk - 1) / kChunk;
            const FoldFactors f = foldRow(c % kSpan == 0, rm, rl, spanMax[m], spanSum[m]);
#pragma unroll
            for (int e = 0; e < 4; e++) foldElement(f, o[m][e], spanO[m][e]);
            if (c % kSpan == kSpan - 1 || c == rowChunks - 1) {
              const FoldFactors g = foldRow(c < kSpan, spanMax[m], spanSum[m], totMax[m], totSum[m]);
#pragma unroll
              for (int e = 0; e < 4; e++) foldElement(g, spanO[m][e], totO[m][e]);
            }
          }
        }
      }
    }
    // The outputs through qs (each token's kGroup heads are its kGroup * kHd contiguous columns of
    // this KV head), then stored a warp per 32 columns (storeOutput quantizes whole 32-blocks).
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kOutRowsPer; m++) {
      const int row = orow + kOutRowThreads * m;
      if ((kRows % kOutRowThreads == 0 || row < kRows) && contexts[row] > 0) {
#pragma unroll
        for (int e = 0; e < 4; e++) qs[row][oc + e] = __fmul_rn(totO[m][e], __frcp_rn(totSum[m]));
      }
    }
    __syncthreads();
    constexpr int kTokenCols = kGroup * kHd;
    for (int i = tid; i < kRows * kHd; i += kRowThreads) {
      const int t = t0 + i / kTokenCols;
      if (t < tokens) storeOutput(out, xq, xqStride, heads, t, kh, i % kTokenCols, rowsShared[kRowsQs + i]);
    }
  }
}
#endif  // JL_QTOKENS > 0

// Folds token t's chunk states at `base` (chunk c at base + c * kPartialFloats) in order, as
// attention() does, and writes the output. The states were written by other blocks of this
// kernel: read through L2 (__ldcg), never from a stale L1 line. kFoldBatch chunks at a time: their
// loads are all issued first, then each chunk's factors (foldFactors: the running maximum, one
// fmaxf on from the last, and two exponentials that nothing later in the batch waits for), and
// last the sums, a chain of a multiply and an add per chunk. Folding chunk by chunk put two exponentials and a
// round trip to L2 on the chain for each of a long context's chunks. The operations and their
// operands are fold()'s, so are the bits.
constexpr int kFoldBatch = 8;
// States c0 .. c0 + kFoldBatch - 1 (those below `states`) at `base`: head g's maximum and sum and
// output element idx, every load issued before any is used.
JL_DEV void loadStates(const float* base, int c0, int states, int g, int idx, float (&m)[kFoldBatch],
                       float (&l)[kFoldBatch], float (&o)[kFoldBatch]) {
#pragma unroll
  for (int k = 0; k < kFoldBatch; k++) {
    if (c0 + k < states) {
      const float* p = base + i64(c0 + k) * kPartialFloats;
      m[k] = __ldcg(p + kGroup * kHd + g);
      l[k] = __ldcg(p + kGroup * kHd + kGroup + g);
      o[k] = __ldcg(p + idx);
    }
  }
}
JL_DEV void combineChunks(const float* base, float* out, int heads, int t, int hb, int chunks, u8* xq, u64 xqStride) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kOwned; i++) {
    const int idx = tid + i * kThreads;
    if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
      const int g = idx / kHd;
      float totMax = 0, totSum = 0, totO = 0;
      for (int c0 = 0; c0 < chunks; c0 += kFoldBatch) {
        float m[kFoldBatch], l[kFoldBatch], o[kFoldBatch], now[kFoldBatch], a[kFoldBatch], b[kFoldBatch], last = 0;
        loadStates(base, c0, chunks, g, idx, m, l, o);
#pragma unroll
        for (int k = 0; k < kFoldBatch; k++) {  // only the maxima chain; a and b hang off it
          if (c0 + k == 0) {
            now[k] = m[k];  // chunk 0 is taken as it is
          } else if (c0 + k < chunks) {
            foldFactors(k == 0 ? totMax : now[k - 1], m[k], now[k], a[k], b[k]);
          }
          if (c0 + k < chunks) last = now[k];
        }
#pragma unroll
        for (int k = 0; k < kFoldBatch; k++) {
          if (c0 + k == 0) {
            totSum = l[k], totO = o[k];
          } else if (c0 + k < chunks) {
            foldScaled(a[k], b[k], l[k], o[k], totSum, totO);
          }
        }
        totMax = last;  // (not now[chunks - c0 - 1]: an index known only at run time puts now[] in local memory)
      }
      storeOutput(out, xq, xqStride, heads, t, hb, idx, __fmul_rn(totO, __frcp_rn(totSum)));
    }
  }
}

// Folds token t's unit states at `base` in two levels - each run of `perSpan` states in order, then
// those runs in order - as attendChunks folds a JL_SPAN module's chunks; the loads go kFoldBatch at
// a time. perSpan == 0: one level (combineChunks).
JL_DEV void combineInSpans(const float* base, float* out, int heads, int t, int hb, int states, int perSpan, u8* xq,
                           u64 xqStride) {
  if (perSpan == 0) {
    combineChunks(base, out, heads, t, hb, states, xq, xqStride);
    return;
  }
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kOwned; i++) {
    const int idx = tid + i * kThreads;
    if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
      const int g = idx / kHd;
      float totMax = 0, totSum = 0, totO = 0, spanMax = 0, spanSum = 0, spanO = 0;
      for (int c0 = 0; c0 < states; c0 += kFoldBatch) {
        float m[kFoldBatch], l[kFoldBatch], o[kFoldBatch];
        loadStates(base, c0, states, g, idx, m, l, o);
#pragma unroll
        for (int k = 0; k < kFoldBatch; k++) {
          const int c = c0 + k;
          if (c < states) {
            foldInSpan(c % perSpan == 0, c % perSpan == perSpan - 1 || c == states - 1, c < perSpan, m[k], l[k], o[k],
                       spanMax, spanSum, spanO, totMax, totSum, totO);
          }
        }
      }
      storeOutput(out, xq, xqStride, heads, t, hb, idx, __fmul_rn(totO, __frcp_rn(totSum)));
    }
  }
}

// Decode over a long context, one launch: attention_split (a chunk a block) or attention_spans
// (a chunk or a span a block), both this body. With B = heads / kGroup blocks per token, grid
// (tokens, B * maxUnits), blockIdx.y = hb + B * u: block (t, hb, unit u) attends to the unit's
// chunks [u chunksPerBlock, ..) and writes their state to partials[((t * B + hb) * maxUnits + u) *
// kPartialFloats ..], and the block that completes a (token, heads block)'s units folds them all in
// order (combineInSpans: in spans of statesPerSpan units, or one level when 0), as attention() does
// - so the bits do not depend on which block that is. counters[t * B + hb] counts the finished
// units; it is zero before the launch and the folding block sets it back to zero (the atomic only
// counts: no result goes through it).
JL_DEV void attendUnit(const float* q, float* partials, unsigned* counters, float* out, int heads, int kvHeads,
                       float scale, const int* positions, const int* tableOffsets, const u64* tables, int maxUnits,
                       int chunksPerBlock, int statesPerSpan, u8* xq, u64 xqStride, int window) {
#if JL_ATTN_TIMING
  unsigned startNs;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(startNs));
#endif
  JL_STAMP(1);
  __shared__ bool folds;
  const int blocks = heads / kGroup;
  const int t = blockIdx.x, hb = blockIdx.y % blocks, u = blockIdx.y / blocks;
  const int start = contextStart(positions[t], window), n = positions[t] + 1 - start;
  const int chunks = (n + kChunk - 1) / kChunk, units = (chunks + chunksPerBlock - 1) / chunksPerBlock;
  if (u >= units) return;
  float* base = partials + i64(t * blocks + hb) * maxUnits * kPartialFloats;
  const int c0 = u * chunksPerBlock, c1 = min(c0 + chunksPerBlock, chunks);
  attendChunks(q, nullptr, base + i64(u) * kPartialFloats, heads, kvHeads, scale, t, hb, n, start, c0, c1,
               tables + tableOffsets[t], nullptr, 0);
  __threadfence();  // this block's state is visible to every block before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = counters + t * blocks + hb;
    folds = atomicAdd(counter, 1u) == unsigned(units - 1);
    if (folds) *counter = 0;  // every other block of this (token, head) has counted
  }
  __syncthreads();
  JL_STAMP(7);
  if (folds) {
    __threadfence();
    combineInSpans(base, out, heads, t, hb, units, statesPerSpan, xq, xqStride);
  }
#if JL_ATTN_TIMING
  JL_STAMP(8);
  if (threadIdx.x == 0 && (folds || blockIdx.y % 97 == 0)) {
    unsigned endNs;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(endNs));
    const long long* st = jlStamps;
    printf(
        "ATT y %d folds %d start %u end %u setup %lld load %lld scores %lld softmax %lld out %lld "
        "count %lld combine %lld\n",
        int(blockIdx.y), int(folds), startNs, endNs, st[2] - st[1], st[3] - st[2], st[4] - st[3], st[5] - st[4],
        st[6] - st[5], st[7] - st[6], st[8] - st[7]);
  }
#endif
}

// A chunk a block: grid (tokens, B * maxChunks), blockIdx.y = hb + B * chunk. (In a JL_SPAN module
// the fold goes in spans here too, though the host launches attention_spans there.)
extern "C" __global__ void __launch_bounds__(kThreads)
    attention_split(const float* q, float* partials, unsigned* counters, float* out, int heads, int kvHeads,
                    float scale, const int* positions, const int* tableOffsets, const u64* tables, int maxChunks,
                    u8* xq, u64 xqStride, int window) {
  awaitPreviousKernel();
  attendUnit(q, partials, counters, out, heads, kvHeads, scale, positions, tableOffsets, tables, maxChunks, 1, kSpan,
             xq, xqStride, window);
}

#if JL_SPAN > 0
// A JL_SPAN module's: a unit is a whole span (chunksPerBlock = kSpan; the last block folds the
// spans) or a chunk (chunksPerBlock = 1; the last block folds them in spans, then the spans).
// Grid (tokens, B * maxUnits). Decode's blocks of one query head capped at 80 registers, 6 a
// multiprocessor (as attention_split has by itself): latency-bound, so warps in flight matter more.
extern "C" __global__ void __launch_bounds__(kThreads, JL_GROUP == 1 ? 6 : 1)
    attention_spans(const float* q, float* partials, unsigned* counters, float* out, int heads, int kvHeads,
                    float scale, const int* positions, const int* tableOffsets, const u64* tables, int maxUnits,
                    int chunksPerBlock, u8* xq, u64 xqStride, int window) {
  awaitPreviousKernel();
  attendUnit(q, partials, counters, out, heads, kvHeads, scale, positions, tableOffsets, tables, maxUnits,
             chunksPerBlock, chunksPerBlock == 1 ? kSpan : 0, xq, xqStride, window);
}
#endif
