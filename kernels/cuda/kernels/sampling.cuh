// The first half of sampling on the GPU (kernels/candidates.h): each row of logits narrowed to its
// best `count` candidates after the repetition penalty, so that a step copies back a few ids and
// values per session instead of a whole row (128k floats for Llama 3). The result is the host's
// selectCandidates() bit for bit: the same ids, the same values, in its order - higher logit
// first, -0 equal to +0, then the lower id, NaN after every number.
//
// One block of 256 threads per row. The order is a 32-bit key per logit (larger key = earlier;
// ties broken by the lower id), so the row's count-th key is found by a radix select over the
// keys' bytes, highest byte first: four histogram passes over the row. The candidates are then
// every logit above that key and the lowest-id ones equal to it, collected in id order by
// block-wide prefix sums (no atomics decide an order), and sorted in shared memory.

constexpr int kSelectThreads = 256;
constexpr int kMaxSelect = 1024;  // engine/runtime/sampler.h: kMaxCandidates

// The order key of a logit: the float's bits made to compare as unsigned integers in the order of
// the values, -0 folded into +0, NaN below everything.
JL_DEV u32 orderKey(float v) {
  if (v != v) return 0;
  if (v == 0.0f) v = 0.0f;
  const u32 b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// A block-wide exclusive prefix sum of `x` over the threads in id order; `total` gets the sum.
JL_DEV u32 blockPrefix(u32 x, u32* warpSums, u32& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u32 inclusive = x;
  for (int d = 1; d < 32; d <<= 1) {
    const u32 y = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += y;
  }
  if (lane == 31) warpSums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    u32 w = lane < kSelectThreads / 32 ? warpSums[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const u32 y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    if (lane < kSelectThreads / 32) warpSums[lane] = w;  // inclusive sums of the warps
  }
  __syncthreads();
  const u32 before = (warp > 0 ? warpSums[warp - 1] : 0) + inclusive - x;
  total = warpSums[kSelectThreads / 32 - 1];
  __syncthreads();  // warpSums is reused by the next call
  return before;
}

// Whether (ka, ia) comes before (kb, ib).
JL_DEV bool earlier(u32 ka, int ia, u32 kb, int ib) { return ka > kb || (ka == kb && ia < ib); }

// logits: rows x vocab (the penalty is applied in place). counts[r]: candidates of row r (1 to
// kMaxSelect). penaltyStart[r] .. penaltyStart[r + 1]: row r's distinct penalised ids in
// penaltyIds, its penalty penalties[r]. Row r's candidates go to outIds / outValues from
// r * stride on.
extern "C" __global__ void __launch_bounds__(kSelectThreads)
    select_candidates(float* logits, i64 vocab, const int* counts, const int* penaltyStart, const int* penaltyIds,
                      const float* penalties, int* outIds, float* outValues, int stride) {
  awaitPreviousKernel();
  __shared__ u32 hist[256];
  __shared__ u32 warpSums[kSelectThreads / 32];
  __shared__ u32 keys[kMaxSelect];
  __shared__ int ids[kMaxSelect];
  __shared__ u32 chosenPrefix, chosenAbove;
  const int row = blockIdx.x;
  float* x = logits + i64(row) * vocab;
  const int count = int(counts[row] < vocab ? counts[row] : vocab);

  // The repetition penalty, in place (the ids are distinct: no two threads write one logit).
  const float penalty = penalties[row];
  if (penalty != 1.0f) {
    for (int i = penaltyStart[row] + threadIdx.x; i < penaltyStart[row + 1]; i += kSelectThreads) {
      const int id = penaltyIds[i];
      if (id >= 0 && id < vocab) {
        const float l = x[id];
        x[id] = l > 0 ? l / penalty : l * penalty;
      }
    }
  }
  __syncthreads();

  if (count == 1) {
    // The argmax: each thread's best over its stride, then the block's in a fixed tree.
    u32 bestKey = 0;
    int bestId = 0x7fffffff;
    for (i64 i = threadIdx.x; i < vocab; i += kSelectThreads) {
      const u32 k = orderKey(x[i]);
      if (earlier(k, int(i), bestKey, bestId)) {
        bestKey = k;
        bestId = int(i);
      }
    }
    keys[threadIdx.x] = bestKey;
    ids[threadIdx.x] = bestId;
    __syncthreads();
    for (int half = kSelectThreads / 2; half > 0; half >>= 1) {
      if (threadIdx.x < half && earlier(keys[threadIdx.x + half], ids[threadIdx.x + half], keys[threadIdx.x],
                                        ids[threadIdx.x])) {
        keys[threadIdx.x] = keys[threadIdx.x + half];
        ids[threadIdx.x] = ids[threadIdx.x + half];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      outIds[i64(row) * stride] = ids[0];
      outValues[i64(row) * stride] = x[ids[0]];
    }
    return;
  }

  // Radix select: the count-th largest key, a byte at a time from the top. `above`: how many keys
  // are known to be larger than every key with the chosen prefix.
  u32 prefix = 0, mask = 0, above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    for (i64 i = threadIdx.x; i < vocab; i += kSelectThreads) {
      const u32 k = orderKey(x[i]);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u32 seen = above;
      int bin = 255;
      for (; bin > 0; bin--) {
        if (seen + hist[bin] >= u32(count)) break;
        seen += hist[bin];
      }
      chosenPrefix = prefix | (u32(bin) << shift);
      chosenAbove = seen;
    }
    __syncthreads();
    prefix = chosenPrefix;
    above = chosenAbove;
    mask |= 255u << shift;
    __syncthreads();
  }
  // `prefix` is the count-th key; `above` keys are larger; the rest come from the ties, lowest
  // ids first. Collected in id order: the larger ones into [0, above), the ties after.
  const u32 ties = u32(count) - above;
  u32 placedAbove = 0, placedTies = 0;
  for (i64 base = 0; base < vocab; base += kSelectThreads) {
    const i64 i = base + threadIdx.x;
    const u32 k = i < vocab ? orderKey(x[i]) : 0;
    const u32 isAbove = i < vocab && k > prefix, isTie = i < vocab && k == prefix;
    u32 totalAbove, totalTies;
    const u32 atAbove = placedAbove + blockPrefix(isAbove, warpSums, totalAbove);
    const u32 atTie = placedTies + blockPrefix(isTie, warpSums, totalTies);
    if (isAbove) {
      keys[atAbove] = k;
      ids[atAbove] = int(i);
    }
    if (isTie && atTie < ties) {
      keys[above + atTie] = k;
      ids[above + atTie] = int(i);
    }
    placedAbove += totalAbove;
    placedTies += totalTies;
  }
  __syncthreads();

  // Sorted in the candidate order: a bitonic sort over the next power of two, padded with entries
  // that come after everything.
  int n = 1;
  while (n < count) n <<= 1;
  for (int i = count + threadIdx.x; i < n; i += kSelectThreads) {
    keys[i] = 0;
    ids[i] = 0x7fffffff;
  }
  __syncthreads();
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride2 = size >> 1; stride2 > 0; stride2 >>= 1) {
      for (int i = threadIdx.x; i < n; i += kSelectThreads) {
        const int j = i ^ stride2;
        if (j > i) {
          const bool ascending = (i & size) == 0;  // here: "earlier first"
          const bool swap = ascending ? earlier(keys[j], ids[j], keys[i], ids[i])
                                      : earlier(keys[i], ids[i], keys[j], ids[j]);
          if (swap) {
            const u32 tk = keys[i];
            keys[i] = keys[j];
            keys[j] = tk;
            const int ti = ids[i];
            ids[i] = ids[j];
            ids[j] = ti;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < count; i += kSelectThreads) {
    outIds[i64(row) * stride + i] = ids[i];
    outValues[i64(row) * stride + i] = x[ids[i]];
  }
}
