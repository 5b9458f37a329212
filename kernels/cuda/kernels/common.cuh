// Device code shared by every CUDA kernel module: fixed-width types, fp16/bf16 conversions, loads
// of a known alignment, and warp reductions in a fixed order.
//
// These files are compiled at run time by NVRTC (kernels/cuda/kernel_library.cc prepends the
// #defines that specialise them), without any CUDA header: NVRTC's built-ins give the vector
// types, __ldg and the warp shuffles. The whole build uses --fmad=false, so a*b+c is two
// roundings exactly as on the CPU; kernels that want fused multiply-adds say fmaf() explicitly.
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define JL_DEV __device__ __forceinline__

// The first statement of every kernel. On sm_90 and later the host launches kernels with
// programmatic dependent launch (docs/cuda.md): a kernel's blocks may be scheduled while the
// kernel before it in the stream is still running, and griddepcontrol.wait holds them until that
// kernel has finished and its writes are visible. Waiting first, before any load or store, keeps
// stream order for every buffer (also one this kernel overwrites while the previous one still
// reads it); what is gained is the launch itself - the next kernel's blocks are resident and
// waiting instead of being launched after the previous kernel drains. launch_dependents then lets
// the kernel after this one be scheduled early in turn. Below sm_90 both are absent and the launch
// is an ordinary one. Stream order is transitive through the wait: kernel n + 2 cannot pass its
// wait before kernel n + 1 finished, which could not start before kernel n finished. The one
// exception to "first": the integer products load their first weights before it (matmul_int.cuh:
// productWarp), since no kernel of a step writes weights.
JL_DEV void awaitPreviousKernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// IEEE binary16 -> binary32 (exact) and back (round to nearest even, as the CPU's fp32ToFp16).
JL_DEV float h2f(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
JL_DEV u16 f2h(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
JL_DEV float bf2f(u16 b) { return __uint_as_float(u32(b) << 16); }

// The largest power of two (up to `base`) that divides `offset`: the alignment of base-aligned
// memory at that offset.
__host__ __device__ constexpr int alignAt(int base, int offset) {
  return offset == 0 ? base : ((offset & -offset) < base ? (offset & -offset) : base);
}

JL_DEV u32 ldU8(const u8* p) { return __ldg(p); }
JL_DEV u32 ldU16(const u8* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }

// 4, 8 and 16 bytes at p, which is A-aligned (A a power of two >= 2): one load as wide as the
// alignment allows, narrower ones otherwise. Little-endian words.
template <int A>
JL_DEV u32 ld4(const u8* p) {
  if constexpr (A >= 4) {
    return __ldg(reinterpret_cast<const unsigned int*>(p));
  } else {
    return ldU16(p) | (ldU16(p + 2) << 16);
  }
}
template <int A>
JL_DEV void ld8(const u8* p, u32 out[2]) {
  if constexpr (A >= 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    out[0] = v.x;
    out[1] = v.y;
  } else {
    out[0] = ld4<A>(p);
    out[1] = ld4<A>(p + 4);
  }
}
template <int A>
JL_DEV void ld16(const u8* p, u32 out[4]) {
  if constexpr (A >= 16) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
    ld8<A>(p, out);
    ld8<A>(p + 8, out + 2);
  }
}

// Byte i (0..7) of two little-endian words.
JL_DEV u32 byteOf(const u32 w[2], int i) { return (w[i >> 2] >> (8 * (i & 3))) & 0xFFu; }

// Butterfly sums over a warp: every lane ends with the same bits (a + b == b + a exactly), and the
// order is fixed, so the result never depends on timing.
JL_DEV float warpSum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
JL_DEV double warpSumD(double v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
JL_DEV float warpMax(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The kRows weight rows a warp of a matrix product takes from r0 on; past the last row, the last
// row again (computed, never stored).
template <int kRows>
JL_DEV void rowPointers(const u8* w, u64 rowStride, int r0, int rows, const u8* (&wr)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; r++) wr[r] = w + u64(min(r0 + r, rows - 1)) * rowStride;
}

// The end of a matrix product: each (row, token) accumulator is summed over the kLanes lanes that
// hold it (lane `sub` of them) by a fixed butterfly - xor by less than kLanes stays among them, and
// for 32 lanes it is warpSum - and lane (r kTokens + t) % kLanes stores y[t0 + t][r0 + r] (+ bias).
template <int kLanes, int kRows, int kTokens>
JL_DEV void storeLaneSums(const float (&acc)[kRows][kTokens], int sub, int r0, int t0, int rows, int tokens,
                          float* __restrict__ y, const float* __restrict__ bias) {
#pragma unroll
  for (int r = 0; r < kRows; r++) {
#pragma unroll
    for (int t = 0; t < kTokens; t++) {
      float sum = acc[r][t];
#pragma unroll
      for (int off = kLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const int row = r0 + r, token = t0 + t;
      if (sub == ((r * kTokens + t) & (kLanes - 1)) && row < rows && token < tokens) {
        y[i64(token) * rows + row] = bias ? __fadd_rn(sum, bias[row]) : sum;
      }
    }
  }
}

// Asynchronous copies global -> shared memory (sm_80 and later; elsewhere they do nothing, and
// callers take another path): no registers hold the data on its way.
JL_DEV u32 sharedAddress(const void* p) { return u32(__cvta_generic_to_shared(p)); }
JL_DEV void copyAsync16(u32 to, const void* from) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from) : "memory");
#endif
}
JL_DEV void copyAsync8(u32 to, const void* from) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(to), "l"(from) : "memory");
#endif
}
JL_DEV void copyAsync4(u32 to, const void* from) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(to), "l"(from) : "memory");
#endif
}
JL_DEV void commitCopies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Until at most n of this thread's committed groups are still in flight.
template <int n>
JL_DEV void awaitCopies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
#endif
}
