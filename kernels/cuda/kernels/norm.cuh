// The residual add and RMS norm of one activation row, in one fixed order of operations whatever
// block runs it: rms_norm (elementwise.cuh, a block of kNormThreads) and the integer products that
// finish with the norm of their output (matmul_int.cuh, the last block of 128 threads) give the
// same bits, so a step's logits do not depend on which of them ran.
//
// The order is that of kNormThreads "virtual threads": virtual thread v sums, in double, the
// squares of elements v, v + kNormThreads, ... in turn; each virtual warp (32 consecutive virtual
// threads) adds its lanes by warpSumD's butterfly; the first warp adds the kNormThreads / 32 warp
// sums by the same butterfly. A block of blockDim.x threads (a multiple of 32 dividing
// kNormThreads) plays virtual threads t, t + blockDim.x, ...: virtual warp (t + j blockDim.x) / 32
// is real warp t / 32 in turn j, its lanes are the real lanes, so every butterfly is the same.
// Needs quantize_x.cuh (quantizeBlock32) before it.

constexpr int kNormThreads = 1024;

// x += addend (when given; in place), then out = x / rms(x) * w, and out's integer form into
// xqRow when given (dim % 32 == 0 then). addend may be out (each element is read before it is
// written, by the same thread), and is read through L2 (__ldcg): in the products it was written by
// other blocks of the same kernel. Called by every thread of the block.
JL_DEV void addAndNormRow(float* x, const float* addend, const float* w, float* out, u8* xqRow, int dim, float eps) {
  __shared__ double partial[kNormThreads / 32];
  __shared__ float scaleShared;
  const int threads = blockDim.x, turns = kNormThreads / threads, lane = threadIdx.x & 31;
  for (int j = 0; j < turns; j++) {
    const int v = threadIdx.x + j * threads;  // the virtual thread
    double sum = 0;
    for (int i = v; i < dim; i += kNormThreads) {
      float value = x[i];
      if (addend) {
        value = __fadd_rn(value, __ldcg(addend + i));
        x[i] = value;
      }
      sum += double(value) * double(value);
    }
    sum = warpSumD(sum);
    if (lane == 0) partial[v >> 5] = sum;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const double total = warpSumD(partial[threadIdx.x]);
    if (threadIdx.x == 0) scaleShared = float(1.0 / sqrt(total / double(dim) + double(eps)));
  }
  __syncthreads();
  const float scale = scaleShared;
  // Each thread reads back only the elements it wrote above (i = v + k kNormThreads has i %
  // threads == threadIdx.x either way).
  for (int i = threadIdx.x; i < dim; i += threads) {  // with xqRow: dim % 32 == 0, whole warps per turn
    const float v = __fmul_rn(__fmul_rn(x[i], scale), w[i]);
    out[i] = v;
    if (xqRow) quantizeBlock32(v, xqRow, dim, i & ~31);
  }
  __syncthreads();  // partial and scaleShared are free for the next row
}
