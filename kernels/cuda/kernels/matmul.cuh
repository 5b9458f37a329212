// Matrix products with one weight matrix type and row length (weights.cuh: JL_WTYPE, JL_K,
// JL_ALIGN), and the embedding lookup that decodes whole rows.
//
// y[t][r] = sum_k w[r][k] * x[t][k] (+ bias[r]). A warp owns kRows rows and kTokens tokens; its
// 32 lanes split the row in steps of 256 elements, lane l taking elements 256s + 8l .. +7, so a
// warp's loads of weights and of x are contiguous. Each lane accumulates every (row, token) in
// one fused multiply-add chain (steps ascending, elements ascending), and the warp sums its lanes
// by a fixed butterfly. The order depends only on JL_K: a token's result is bit-identical
// whichever variant (1, 4 or 16 tokens per warp) computed it, so prefill and decode agree exactly.
//
// JL_XVEC (JL_K % 4 == 0 and x 16-byte aligned, checked by the host): x rows load as float4.

template <int kTokens, int kRows>
JL_DEV void matmulBody(const u8* __restrict__ w, u64 rowStride, int rows, const float* __restrict__ x, int tokens,
                       float* __restrict__ y, const float* __restrict__ bias) {
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int r0 = warp * kRows;
  if (r0 >= rows) return;
  const int t0 = blockIdx.y * kTokens;
  float acc[kRows][kTokens] = {};
  const u8* wr[kRows];
  rowPointers(w, rowStride, r0, rows, wr);

  constexpr int kSteps = (JL_K + 255) / 256;
  const auto step = [&](int s) {
    const int e = s * 256 + lane * 8;
    if (JL_K % 256 != 0 && e >= JL_K) return;
    float wv[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; r++) Weights::decode8(wr[r], e, wv[r]);
#pragma unroll
    for (int t = 0; t < kTokens; t++) {
      const float* xt = x + i64(min(t0 + t, tokens - 1)) * JL_K + e;
      float xv[8];
#if JL_XVEC
      const float4 a = __ldg(reinterpret_cast<const float4*>(xt));
      const float4 b = __ldg(reinterpret_cast<const float4*>(xt + 4));
      xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
#else
#pragma unroll
      for (int i = 0; i < 8; i++) xv[i] = (JL_K % 8 == 0 || e + i < JL_K) ? __ldg(xt + i) : 0.0f;
#endif
#pragma unroll
      for (int r = 0; r < kRows; r++) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
          if (JL_K % 8 == 0 || e + i < JL_K) acc[r][t] = fmaf(wv[r][i], xv[i], acc[r][t]);
        }
      }
    }
  };
  if constexpr (kTokens == 1) {
    // Decode reads each weight once: unrolled steps put several steps' loads in flight at once.
#pragma unroll 4
    for (int s = 0; s < kSteps; s++) step(s);
  } else {
#pragma unroll 1
    for (int s = 0; s < kSteps; s++) step(s);
  }
  storeLaneSums<32>(acc, lane, r0, t0, rows, tokens, y, bias);
}

// JL_VARIANT picks the one kernel this module holds (each compiles on first use, so a model that
// only decodes never waits for the prefill variant): 0 get_rows, else matmul with that many
// tokens per warp (1, 4 or 16; rows per warp 1, 2 and 4 - kernels/cuda/cuda_device.cc matches).
#if JL_VARIANT == 1
extern "C" __global__ void __launch_bounds__(128) matmul(const u8* w, u64 rowStride, int nRows, const float* x,
                                                         int nTokens, float* y, const float* bias) {
  awaitPreviousKernel();
  matmulBody<1, 1>(w, rowStride, nRows, x, nTokens, y, bias);
}
#elif JL_VARIANT == 4
extern "C" __global__ void __launch_bounds__(128) matmul(const u8* w, u64 rowStride, int nRows, const float* x,
                                                         int nTokens, float* y, const float* bias) {
  awaitPreviousKernel();
  matmulBody<4, 2>(w, rowStride, nRows, x, nTokens, y, bias);
}
#elif JL_VARIANT == 16
extern "C" __global__ void __launch_bounds__(128) matmul(const u8* w, u64 rowStride, int nRows, const float* x,
                                                         int nTokens, float* y, const float* bias) {
  awaitPreviousKernel();
  matmulBody<16, 4>(w, rowStride, nRows, x, nTokens, y, bias);
}
#elif JL_VARIANT == 0
// out[t] = row ids[t] of the table, decoded. Grid: (row chunks, tokens), 256 threads.
extern "C" __global__ void __launch_bounds__(256) get_rows(const u8* table, u64 rowStride, const int* ids, float* out) {
  awaitPreviousKernel();
  const int t = blockIdx.y;
  const u8* row = table + u64(ids[t]) * rowStride;
  float* o = out + i64(t) * JL_K;
  for (int e = (blockIdx.x * blockDim.x + threadIdx.x) * 8; e < JL_K; e += gridDim.x * blockDim.x * 8) {
    float w[8];
    Weights::decode8(row, e, w);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      if (JL_K % 8 == 0 || e + i < JL_K) o[e + i] = w[i];
    }
  }
}
#else
#error "JL_VARIANT: 0, 1, 4 or 16"
#endif
