// The small ops: RMS norm, RoPE, SwiGLU, GEGLU, add, and storing K/V into pages (also right after RoPE,
// in one launch). Each mirrors the CPU device's arithmetic (kernels/cpu/cpu_device.cc) operation
// for operation; the RMS sum of squares is in double, in a fixed tree order.
//
// rms_norm, swiglu and geglu feed matrix products; given xq (non-null) they also write their output's
// integer form for the integer kernels (quantize_x.cuh, compiled into this module before this
// file), saving the separate quantize_x launch. Then the row length is a multiple of 32, so each
// warp's 32 consecutive outputs are one quantization block.

// One block of kNormThreads per row (decode normalises one row: a wide block keeps each thread's
// chain of double adds short). With addend (non-null) it first adds that to x, in place - the
// residual add before the next layer's norm, one launch instead of two; each thread re-reads only
// the elements it wrote.
constexpr int kNormThreads = 1024;
extern "C" __global__ void __launch_bounds__(kNormThreads) rms_norm(float* x, const float* w, float* out, int dim,
                                                                    float eps, u8* xq, u64 xqStride,
                                                                    const float* addend) {
  awaitPreviousKernel();
  __shared__ double partial[kNormThreads / 32];
  __shared__ float scaleShared;
  float* xr = x + i64(blockIdx.x) * dim;
  float* o = out + i64(blockIdx.x) * dim;
  double sum = 0;
  if (addend) {
    const float* ar = addend + i64(blockIdx.x) * dim;
    for (int i = threadIdx.x; i < dim; i += kNormThreads) {
      const float v = __fadd_rn(xr[i], ar[i]);
      xr[i] = v;
      sum += double(v) * double(v);
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += kNormThreads) sum += double(xr[i]) * double(xr[i]);
  }
  sum = warpSumD(sum);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    const double total = warpSumD(partial[threadIdx.x]);
    if (threadIdx.x == 0) scaleShared = float(1.0 / sqrt(total / double(dim) + double(eps)));
  }
  __syncthreads();
  const float scale = scaleShared;
  if (xq) {
    u8* q = xq + u64(blockIdx.x) * xqStride;
    for (int i = threadIdx.x; i < dim; i += kNormThreads) {  // dim % 32 == 0: whole warps take each turn
      const float v = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
      o[i] = v;
      quantizeBlock32(v, q, dim, i & ~31);
    }
    return;
  }
  for (int i = threadIdx.x; i < dim; i += kNormThreads) o[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

// The angle of pair i at `position`, invFreq = invFreq[i] = base^(-2i/dims) / factor[i] (computed
// in double on the host exactly as the CPU does). In double, as its cos and sin are; those are
// rounded to float.
JL_DEV double ropeAngle(int position, double freqScale, double invFreq) {
  return double(position) * freqScale * invFreq;
}

// cos and sin of token t's angles, each rounded to float and times mscale (LongRoPE's attention
// factor), into cs[0, half) and cs[half, 2 half) (shared memory; the caller synchronises before
// reading them).
JL_DEV void ropeAngles(float* cs, int position, const double* invFreq, int half, double freqScale, float mscale) {
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double angle = ropeAngle(position, freqScale, invFreq[i]);
    cs[i] = __fmul_rn(float(cos(angle)), mscale);
    cs[half + i] = __fmul_rn(float(sin(angle)), mscale);
  }
}

// Rotates pair i of one head's row v by the angle whose cos and sin are c and s: elements
// (i, i + half) with neox, else (2i, 2i + 1). Returns where they are and what they became.
struct RotatedPair {
  int a, b;
  float y0, y1;
};
JL_DEV RotatedPair rotatePair(float* v, int i, int half, int neox, float c, float s) {
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  v[a] = y0;
  v[b] = y1;
  return {a, b, y0, y1};
}

// Rotates the `heads` heads of one token row x by the angles in cs. The block's threads share the
// pairs.
JL_DEV void ropeRow(float* x, int heads, int headDim, const float* cs, int half, int neox) {
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    rotatePair(x + i64(h) * headDim, i, half, neox, cs[i], cs[half + i]);
  }
}

// One block per token: x[t] rotated in place.
extern "C" __global__ void __launch_bounds__(256) rope(float* x, int heads, int headDim, const int* positions,
                                                       const double* invFreq, int half, double freqScale, int neox,
                                                       float mscale) {
  awaitPreviousKernel();
  extern __shared__ float cs[];  // cos[half], sin[half]
  const int t = blockIdx.x;
  ropeAngles(cs, positions[t], invFreq, half, freqScale, mscale);
  __syncthreads();
  ropeRow(x + i64(t) * heads * headDim, heads, headDim, cs, half, neox);
}

// Element i of a K (or, with isV, V) row into slot `slot` of `page` (KvLayout: pageTokens slots
// of K, then of V; rows of width elements): fp16 by round to nearest even, or fp32.
JL_DEV void storeKv(u64 page, int slot, int width, int pageTokens, int f16, int i, float value, bool isV) {
  const i64 at = i64(isV ? pageTokens + slot : slot) * width + i;
  if (f16) {
    reinterpret_cast<u16*>(page)[at] = f2h(value);
  } else {
    reinterpret_cast<float*>(page)[at] = value;
  }
}

// Token t's K and V rows (width elements each) into slot `slot` of `page`, the block's threads
// sharing the elements.
JL_DEV void storeKvRow(const float* k, const float* v, u64 page, int slot, int width, int pageTokens, int f16) {
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float kv = k[i], vv = v[i];
    storeKv(page, slot, width, pageTokens, f16, i, kv, false);
    storeKv(page, slot, width, pageTokens, f16, i, vv, true);
  }
}

// rope of q (heads) and k (kvHeads), then k and v into token t's KV slot: the arithmetic of rope
// and kv_store, one launch instead of three. Grid: (tokens, enough blocks of 256 threads for a
// token's items). An item is a pair of q or of k - its cos and sin computed by the thread that
// rotates it (ropeAngle, as ropeAngles does); a pair of k is stored into the page as soon as
// it is rotated - or an element of v (and of k past the rotary dims). No item waits for another,
// so a decode step's token costs one trip to memory and back, not the chain of them (angles, q,
// k, store) that one block per token walked.
extern "C" __global__ void __launch_bounds__(256) rope_store(float* q, float* k, const float* v, int heads, int kvHeads,
                                                             int headDim, const int* positions, const double* invFreq,
                                                             int half, double freqScale, int neox, float mscale,
                                                             const u64* pages, const int* slots, int pageTokens,
                                                             int f16) {
  awaitPreviousKernel();
  const int t = blockIdx.x, width = kvHeads * headDim, qPairs = heads * half, kPairs = kvHeads * half;
  const int item = blockIdx.y * blockDim.x + threadIdx.x;
  if (item < qPairs + kPairs) {
    const bool isK = item >= qPairs;
    const int idx = isK ? item - qPairs : item, h = idx / half, i = idx % half;
    float* x = isK ? k + i64(t) * width + i64(h) * headDim : q + (i64(t) * heads + h) * headDim;
    const double angle = ropeAngle(positions[t], freqScale, invFreq[i]);
    const RotatedPair p =
        rotatePair(x, i, half, neox, __fmul_rn(float(cos(angle)), mscale), __fmul_rn(float(sin(angle)), mscale));
    if (isK) {
      storeKv(pages[t], slots[t], width, pageTokens, f16, h * headDim + p.a, p.y0, false);
      storeKv(pages[t], slots[t], width, pageTokens, f16, h * headDim + p.b, p.y1, false);
    }
  } else if (item < qPairs + kPairs + width) {
    const int i = item - qPairs - kPairs;
    storeKv(pages[t], slots[t], width, pageTokens, f16, i, v[i64(t) * width + i], true);
    // Past the rotary dims (2 half of each head) k is stored as it is.
    if (i % headDim >= 2 * half) storeKv(pages[t], slots[t], width, pageTokens, f16, i, k[i64(t) * width + i], false);
  }
}

// With xq: rows of k elements (n and k multiples of 32; blockDim 256).
extern "C" __global__ void swiglu(const float* gate, const float* up, float* out, i64 n, u8* xq, u64 xqStride,
                                  int k) {
  awaitPreviousKernel();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    const float v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
    out[i] = v;
    if (xq) quantizeBlock32(v, xq + u64(i / k) * xqStride, k, int(i % k) & ~31);
  }
}

// GEGLU with GELU's tanh form (gemma): g / (1 + exp(-z)) * up, z = sqrt(8 / pi) (g + 0.044715 g^3)
// written as g (c + c 0.044715 g^2) with the CPU's constants (kernels/cpu/activation.cc, rounded to
// float there: 0x3fcc422a and 0x3d922279) and its vector kernels' operations - one fma for the
// bracket - so only exp differs from the CPU. With xq as swiglu.
constexpr float kGeluScale = 1.59576917f, kGeluCubic = 0.0713548139f;
extern "C" __global__ void geglu(const float* gate, const float* up, float* out, i64 n, u8* xq, u64 xqStride, int k) {
  awaitPreviousKernel();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    const float z = __fmul_rn(g, fmaf(kGeluCubic, __fmul_rn(g, g), kGeluScale));
    const float v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-z))), up[i]);
    out[i] = v;
    if (xq) quantizeBlock32(v, xq + u64(i / k) * xqStride, k, int(i % k) & ~31);
  }
}

extern "C" __global__ void add(float* x, const float* y, i64 n) {
  awaitPreviousKernel();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    x[i] = __fadd_rn(x[i], y[i]);
  }
}

extern "C" __global__ void scale(float* x, float s, i64 n) {
  awaitPreviousKernel();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    x[i] = __fmul_rn(x[i], s);
  }
}

// One block per token: token t's K and V to slot slots[t] of page pages[t] (KvLayout).
extern "C" __global__ void __launch_bounds__(256) kv_store(const float* k, const float* v, const u64* pages,
                                                           const int* slots, int width, int pageTokens, int f16) {
  awaitPreviousKernel();
  const int t = blockIdx.x;
  storeKvRow(k + i64(t) * width, v + i64(t) * width, pages[t], slots[t], width, pageTokens, f16);
}
