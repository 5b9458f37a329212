// Attention of a batch of query tokens over the paged KV cache (kernels/device.h: KvLayout).
//
// Specialised by JL_HD (head dim), JL_GROUP (query heads per KV head), JL_PAGE_TOKENS and
// JL_KV_F16 (fp16 pages, else fp32). One block of 128 threads per (token, KV head) serves the
// JL_GROUP query heads that share that KV head, so each K/V row is read once for all of them.
// Positions go in tiles of kTile through shared memory with an online softmax (running max and
// sum, rescaled per tile). Every sum has a fixed order: dot products run over the head dim in
// order, tile sums are warp butterflies, and each output element accumulates its tile's
// positions in order - the result never depends on timing.
//
// Tables: token t's pages are tables[tableOffsets[t] ..] (device addresses); it attends to
// positions 0..positions[t].

constexpr int kHd = JL_HD, kGroup = JL_GROUP, kPageTokens = JL_PAGE_TOKENS;
constexpr int kTile = 4096 / JL_HD > 64 ? 64 : 4096 / JL_HD;  // K and V tiles take 32 KiB together
constexpr int kThreads = 128;
constexpr int kOwned = (kGroup * kHd + kThreads - 1) / kThreads;  // output elements per thread
#if JL_KV_F16
typedef u16 KvElement;
JL_DEV float kvLoad(const KvElement* p) { return h2f(__ldg(reinterpret_cast<const unsigned short*>(p))); }
#else
typedef float KvElement;
JL_DEV float kvLoad(const KvElement* p) { return __ldg(p); }
#endif

extern "C" __global__ void __launch_bounds__(128) attention(const float* q, float* out, int heads, int kvHeads,
                                                            float scale, const int* positions, const int* tableOffsets,
                                                            const u64* tables) {
  __shared__ float qs[kGroup][kHd];
  __shared__ float ks[kTile][kHd + 1];  // +1: threads reading different rows hit different banks
  __shared__ float vs[kTile][kHd];
  __shared__ float ps[kGroup][kTile];
  __shared__ float runMax[kGroup], runSum[kGroup], rescale[kGroup];

  const int t = blockIdx.x, kh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n = positions[t] + 1;
  const u64* pages = tables + tableOffsets[t];
  const i64 tokenElems = i64(kvHeads) * kHd;  // one token's K (or V) in a page

  for (int i = tid; i < kGroup * kHd; i += kThreads) {
    qs[i / kHd][i % kHd] = q[(i64(t) * heads + kh * kGroup + i / kHd) * kHd + i % kHd];
  }
  if (tid < kGroup) {
    runMax[tid] = -__int_as_float(0x7f800000);
    runSum[tid] = 0.0f;
  }
  float o[kOwned];
#pragma unroll
  for (int i = 0; i < kOwned; i++) o[i] = 0.0f;

  for (int base = 0; base < n; base += kTile) {
    const int count = min(kTile, n - base);
    __syncthreads();  // the previous tile is consumed (and qs / state are written, first time)
    for (int i = tid; i < count * kHd; i += kThreads) {
      const int j = i / kHd, d = i % kHd, pos = base + j;
      const KvElement* page = reinterpret_cast<const KvElement*>(pages[pos / kPageTokens]);
      const int slot = pos % kPageTokens;
      ks[j][d] = kvLoad(page + i64(slot) * tokenElems + kh * kHd + d);
      vs[j][d] = kvLoad(page + i64(kPageTokens + slot) * tokenElems + kh * kHd + d);
    }
    __syncthreads();
    for (int i = tid; i < kGroup * kTile; i += kThreads) {
      const int g = i / kTile, j = i % kTile;
      if (j < count) {
        float s = 0.0f;
#pragma unroll 8
        for (int d = 0; d < kHd; d++) s = fmaf(qs[g][d], ks[j][d], s);
        ps[g][j] = __fmul_rn(s, scale);
      }
    }
    __syncthreads();
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
      if (lane == 0) {
        const float a = expf(__fsub_rn(before, now));  // 0 on the first tile (before = -inf)
        rescale[g] = a;
        runSum[g] = __fadd_rn(__fmul_rn(runSum[g], a), sum);
        runMax[g] = now;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kOwned; i++) {
      const int idx = tid + i * kThreads;
      if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
        const int g = idx / kHd, d = idx % kHd;
        float acc = __fmul_rn(o[i], rescale[g]);
        for (int j = 0; j < count; j++) acc = fmaf(ps[g][j], vs[j][d], acc);
        o[i] = acc;
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kOwned; i++) {
    const int idx = tid + i * kThreads;
    if (kOwned * kThreads == kGroup * kHd || idx < kGroup * kHd) {
      const int g = idx / kHd, d = idx % kHd;
      out[(i64(t) * heads + kh * kGroup + g) * kHd + d] = __fmul_rn(o[i], __frcp_rn(runSum[g]));
    }
  }
}
