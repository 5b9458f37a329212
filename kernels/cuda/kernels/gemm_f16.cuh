// The prompt path's matrix products (docs/cuda.md "Prompt products on fp16 tensor cores"): a
// weight matrix decoded to fp16 once per product, the prompt's activations rounded to fp16, and
// y = x W^T on mma.sync.m16n8k16 with fp32 accumulators.
//
// Specialised by:
//   JL_WTYPE, JL_K, JL_ALIGN  the weight type, row length (a multiple of 32) and row alignment,
//                             as weights.cuh reads them (for dequant_f16)
//   JL_BM                     weight rows per block of gemm_f16: 32, 64 or 128
//   JL_BK                     K per pipeline stage: 32 (4 stages; the default here) or 64 (3
//                             stages; the device's default where 64 divides JL_K)
//
// The bits of an output y[t][r] depend only on row t of x and row r of W: its accumulator starts
// at 0 and takes the k16 slices in order 0, 16, 32, ... through the same mma instruction whatever
// the block size, the grid or the other rows and tokens (no split of K, no atomics). So a prompt's
// products give the same bits in any batch and in chunks of any size; they differ from the
// integer kernels' (decode's) bits, which is why only prompt tokens come here.

// Weights -> fp16, row-major [rows x JL_K] (every value rounded to nearest even from the decoded
// float, which is kernels/quant/dequantize.cc's). Grid (rows, ceil(JL_K / 2048)), 256 threads.
extern "C" __global__ void __launch_bounds__(256) dequant_f16(const u8* w, u64 rowStride, u16* out) {
  awaitPreviousKernel();
  const int r = blockIdx.x;
  const int e = (blockIdx.y * 256 + threadIdx.x) * 8;
  if (e >= JL_K) return;
  float v[8];
  Weights::decode8(w + u64(r) * rowStride, e, v);
  uint4 packed;
  packed.x = u32(f2h(v[0])) | (u32(f2h(v[1])) << 16);
  packed.y = u32(f2h(v[2])) | (u32(f2h(v[3])) << 16);
  packed.z = u32(f2h(v[4])) | (u32(f2h(v[5])) << 16);
  packed.w = u32(f2h(v[6])) | (u32(f2h(v[7])) << 16);
  *reinterpret_cast<uint4*>(out + i64(r) * JL_K + e) = packed;
}

// Activations -> fp16, [tokens x JL_K] both (x 16-byte aligned). Grid (tokens, ceil(JL_K / 1024)),
// 256 threads.
extern "C" __global__ void __launch_bounds__(256) to_f16(const float* x, u16* out) {
  awaitPreviousKernel();
  const int t = blockIdx.x;
  const int e = (blockIdx.y * 256 + threadIdx.x) * 4;
  if (e >= JL_K) return;
  const float4 v = *reinterpret_cast<const float4*>(x + i64(t) * JL_K + e);
  uint2 packed;
  packed.x = u32(f2h(v.x)) | (u32(f2h(v.y)) << 16);
  packed.y = u32(f2h(v.z)) | (u32(f2h(v.w)) << 16);
  *reinterpret_cast<uint2*>(out + i64(t) * JL_K + e) = packed;
}

#ifndef JL_BM
#define JL_BM 128
#endif
#ifndef JL_BK
#define JL_BK 32
#endif

namespace gemm {

constexpr int kBlockRows = JL_BM;  // weight rows of a block
constexpr int kBlockTokens = 128;  // tokens of a block
constexpr int kSliceK = JL_BK;     // K per stage (32 or 64): rows of 64 or 128 bytes
constexpr int kChunks = kSliceK / 8;         // 16-byte chunks of a row
constexpr int kRowBytes = kSliceK * 2;
constexpr int kStages = kSliceK == 64 ? 3 : 4;
constexpr int kWarps = 8;
constexpr int kRowWarps = kBlockRows / 32;  // a warp takes 32 rows (two m16 tiles)
constexpr int kTokenWarps = kWarps / kRowWarps;
constexpr int kWarpTokens = kBlockTokens / kTokenWarps;
constexpr int kTokenTiles = kWarpTokens / 8;  // n8 tiles a warp
constexpr int kSlices = JL_K / kSliceK;
constexpr int kStageBytes = (kBlockRows + kBlockTokens) * kRowBytes;
static_assert(kSliceK == 32 || kSliceK == 64, "gemm_f16: JL_BK 32 or 64");
static_assert(JL_K % kSliceK == 0, "gemm_f16: rows of whole slices");
static_assert(kRowWarps >= 1 && kRowWarps <= 4 && kTokenTiles % 2 == 0, "gemm_f16: JL_BM 32, 64 or 128");

// Byte offset of 16-byte chunk c of row r in a tile. The chunk index is XORed with bits of the row
// (1-2 for 64-byte rows, 0-2 for 128-byte ones), so the eight rows one ldmatrix phase reads fall in
// eight different 16-byte bank groups.
JL_DEV u32 chunkOffset(int r, int c) {
  if constexpr (kRowBytes == 64) return u32(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
  return u32(r * 128 + ((c ^ (r & 7)) << 4));
}

// One 16-byte copy, or zeros (src-size 0) for a row past the matrix's end.
JL_DEV void copyOrZero16(u32 to, const void* from, bool valid) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from), "r"(valid ? 16 : 0)
               : "memory");
#endif
}

JL_DEV void loadMatrix4(u32 address, u32 (&r)[4]) {
#if __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#endif
}

JL_DEV void mma16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

}  // namespace gemm

// y[t][r] = sum_k W[r][k] x[t][k] (+ bias[r]): W fp16 [rows x JL_K], x fp16 [tokens x JL_K].
// Grid (ceil(rows / JL_BM), ceil(tokens / 128)), 256 threads, gemm::kStages * kStageBytes bytes of
// dynamic shared memory. Slices of K reach shared memory by cp.async kStages - 1 ahead of use.
extern "C" __global__ void __launch_bounds__(256) gemm_f16(const u16* __restrict__ w, int rows,
                                                           const u16* __restrict__ x, int tokens,
                                                           float* __restrict__ y, const float* __restrict__ bias) {
  awaitPreviousKernel();
  using namespace gemm;
  extern __shared__ __align__(128) u8 tiles[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = blockIdx.x * kBlockRows, token0 = blockIdx.y * kBlockTokens;
  const u32 base = sharedAddress(tiles);

  // Each thread copies (kBlockRows + kBlockTokens) * kChunks / 256 chunks of a slice.
  auto stage = [&](int slice) {
    const u32 at = base + u32((slice % kStages) * kStageBytes);
    const int k0 = slice * kSliceK;
    for (int i = threadIdx.x; i < kBlockRows * kChunks; i += 256) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = row0 + r < rows;
      const u16* from = w + i64(valid ? row0 + r : 0) * JL_K + k0 + c * 8;
      copyOrZero16(at + chunkOffset(r, c), from, valid);
    }
    for (int i = threadIdx.x; i < kBlockTokens * kChunks; i += 256) {
      const int t = i / kChunks, c = i % kChunks;
      const bool valid = token0 + t < tokens;
      const u16* from = x + i64(valid ? token0 + t : 0) * JL_K + k0 + c * 8;
      copyOrZero16(at + u32(kBlockRows * kRowBytes) + chunkOffset(t, c), from, valid);
    }
  };

  float acc[2][kTokenTiles][4];
#pragma unroll
  for (int m = 0; m < 2; m++) {
#pragma unroll
    for (int n = 0; n < kTokenTiles; n++) {
#pragma unroll
      for (int i = 0; i < 4; i++) acc[m][n][i] = 0.0f;
    }
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < kSlices) stage(s);
    commitCopies();
  }
  const int warpRow = (warp % kRowWarps) * 32, warpToken = (warp / kRowWarps) * kWarpTokens;
  for (int slice = 0; slice < kSlices; slice++) {
    awaitCopies<kStages - 2>();
    __syncthreads();  // the slice is in; every warp is done with the stage the next copy overwrites
    if (slice + kStages - 1 < kSlices) stage(slice + kStages - 1);
    commitCopies();
    const u32 a = base + u32((slice % kStages) * kStageBytes), b = a + u32(kBlockRows * kRowBytes);
#pragma unroll
    for (int step = 0; step < kSliceK / 16; step++) {  // k16 steps, in order
      u32 af[2][4];
#pragma unroll
      for (int m = 0; m < 2; m++) {
        // Rows 0-15 of the m16 tile, chunks 2 step (lanes 0-15) and 2 step + 1 (lanes 16-31).
        loadMatrix4(a + chunkOffset(warpRow + m * 16 + (lane & 15), 2 * step + (lane >> 4)), af[m]);
      }
#pragma unroll
      for (int n = 0; n < kTokenTiles; n += 2) {
        // Two n8 tiles: tokens 0-7 and 8-15 of the pair, chunks 2 step and 2 step + 1 each.
        u32 bf[4];
        const int t = warpToken + n * 8 + (lane & 7) + ((lane >> 4) << 3);
        loadMatrix4(b + chunkOffset(t, 2 * step + ((lane >> 3) & 1)), bf);
#pragma unroll
        for (int m = 0; m < 2; m++) {
          mma16816(acc[m][n], af[m], bf[0], bf[1]);
          mma16816(acc[m][n + 1], af[m], bf[2], bf[3]);
        }
      }
    }
  }

  // acc[m][n]: rows warpRow + 16 m + lane / 4 (+ 8), tokens warpToken + 8 n + 2 (lane % 4) (+ 1).
#pragma unroll
  for (int m = 0; m < 2; m++) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int r = row0 + warpRow + m * 16 + (lane >> 2) + 8 * half;
      if (r >= rows) continue;
      const float add = bias ? bias[r] : 0.0f;
#pragma unroll
      for (int n = 0; n < kTokenTiles; n++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
          const int t = token0 + warpToken + n * 8 + 2 * (lane & 3) + j;
          if (t < tokens) {
            const float v = acc[m][n][2 * half + j];
            y[i64(t) * rows + r] = bias ? __fadd_rn(v, add) : v;
          }
        }
      }
    }
  }
}
