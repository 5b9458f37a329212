// The small ops: RMS norm, RoPE, SwiGLU, add, and storing K/V into pages. Each mirrors the CPU
// device's arithmetic (kernels/cpu/cpu_device.cc) operation for operation; the RMS sum of squares
// is in double, in a fixed tree order.
//
// rms_norm and swiglu feed matrix products; given xq (non-null) they also write their output's
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

// One block per token; invFreq[i] = base^(-2i/dims) / factor[i], computed in double on the host
// exactly as the CPU does. Angles, cos and sin in double, rounded to float.
extern "C" __global__ void __launch_bounds__(256) rope(float* x, int heads, int headDim, const int* positions,
                                                       const double* invFreq, int half, double freqScale, int neox) {
  extern __shared__ float cs[];  // cos[half], sin[half]
  const int t = blockIdx.x;
  const double pos = double(positions[t]) * freqScale;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double angle = pos * invFreq[i];
    cs[i] = float(cos(angle));
    cs[half + i] = float(sin(angle));
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    float* v = x + (i64(t) * heads + h) * headDim;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b], c = cs[i], s = cs[half + i];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

// With xq: rows of k elements (n and k multiples of 32; blockDim 256).
extern "C" __global__ void swiglu(const float* gate, const float* up, float* out, i64 n, u8* xq, u64 xqStride,
                                  int k) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    const float v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
    out[i] = v;
    if (xq) quantizeBlock32(v, xq + u64(i / k) * xqStride, k, int(i % k) & ~31);
  }
}

extern "C" __global__ void add(float* x, const float* y, i64 n) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    x[i] = __fadd_rn(x[i], y[i]);
  }
}

// Grid: (chunks of the row, tokens). Token t's K goes to slot slots[t] of page pages[t], its V
// kPageTokens slots further (KvLayout).
extern "C" __global__ void kv_store(const float* k, const float* v, const u64* pages, const int* slots, int width,
                                    int pageTokens, int f16) {
  const int t = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= width) return;
  const i64 slot = slots[t];
  const float kv = k[i64(t) * width + i], vv = v[i64(t) * width + i];
  if (f16) {
    u16* page = reinterpret_cast<u16*>(pages[t]);
    page[slot * width + i] = f2h(kv);
    page[(pageTokens + slot) * width + i] = f2h(vv);
  } else {
    float* page = reinterpret_cast<float*>(pages[t]);
    page[slot * width + i] = kv;
    page[(pageTokens + slot) * width + i] = vv;
  }
}
