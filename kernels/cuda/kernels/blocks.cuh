// Copies between equal-sized blocks of device memory scattered anywhere (KV pages) and one
// contiguous buffer, in one launch: a migration moves a session's pages as one transfer instead of
// one copy per page (the gather DESIGN.md §3 measured 290x faster than per-page copies).
//
// Grid (blocks, chunks of a block), 256 threads: grid row x moves block x, its chunks' threads
// taking 16 bytes each in turn when `wide` (every address and the block size are multiples of 16),
// else single bytes. Copies only: no arithmetic, the bytes arrive as they were.

JL_DEV void copyBlock(const u8* __restrict__ from, u8* __restrict__ to, u64 bytes, int wide) {
  const u64 step = u64(gridDim.y) * blockDim.x;
  const u64 first = u64(blockIdx.y) * blockDim.x + threadIdx.x;
  if (wide) {
    const uint4* f = reinterpret_cast<const uint4*>(from);
    uint4* t = reinterpret_cast<uint4*>(to);
    for (u64 i = first; i < bytes / 16; i += step) t[i] = f[i];
  } else {
    for (u64 i = first; i < bytes; i += step) to[i] = from[i];
  }
}

// out[x * blockBytes ..] = block x.
extern "C" __global__ void __launch_bounds__(256) gather_blocks(const u64* blocks, u8* out, u64 blockBytes, int wide) {
  awaitPreviousKernel();
  copyBlock(reinterpret_cast<const u8*>(blocks[blockIdx.x]), out + u64(blockIdx.x) * blockBytes, blockBytes, wide);
}

// Block x = in[x * blockBytes ..].
extern "C" __global__ void __launch_bounds__(256) scatter_blocks(const u64* blocks, const u8* in, u64 blockBytes,
                                                                 int wide) {
  awaitPreviousKernel();
  copyBlock(in + u64(blockIdx.x) * blockBytes, reinterpret_cast<u8*>(blocks[blockIdx.x]), blockBytes, wide);
}
