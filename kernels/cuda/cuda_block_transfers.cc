#include "kernels/cuda/cuda_block_transfers.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace jitllm::cuda {

CudaBlockTransfers::CudaBlockTransfers(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue,
                                       CudaKernelSet& kernels, const ResolvedCudaSettings& settings)
    : ctx_(ctx), memory_(memory), queue_(queue), kernels_(kernels), on_(settings.blockKernels) {}

size_t CudaBlockTransfers::prepareBlockBuffer(const uint8_t* const* blocks, size_t count, size_t blockBytes,
                                              const char* what) {
  JITLLM_REQUIRE(
      count < (size_t(1) << 31) && blockBytes < (size_t(1) << 40) && count * blockBytes / blockBytes == count, ctx_.id,
      ": ", what, ": ", count, " blocks of ", blockBytes, " bytes");
  for (size_t i = 0; i < count; i++) memory_.requireOwned(blocks[i], blockBytes, what);
  ctx_.makeCurrent();
  queue_.setOpTokens(0);
  const size_t total = count * blockBytes;
  // Growing synchronises and restarts the ring: before anything is staged.
  memory_.grow(blockBuffer_, total, "block transfers");
  return total;
}

void CudaBlockTransfers::launchBlockCopy(const char* op, CUfunction f, const uint8_t* const* blocks, size_t count,
                                         size_t blockBytes) {
  int wide = blockBytes % 16 == 0;
  const CudaOpQueue::Staged s = queue_.stage(count * sizeof(uint64_t));
  for (size_t i = 0; i < count; i++) {
    const uint64_t address = uint64_t(reinterpret_cast<uintptr_t>(blocks[i]));
    std::memcpy(s.host + i * sizeof(uint64_t), &address, sizeof address);
    wide = wide && address % 16 == 0;
  }
  queue_.commit(s);
  CUdeviceptr list = s.device, buffer = blockBuffer_.ptr();
  uint64_t bytes = blockBytes;
  const size_t units = wide ? blockBytes / 16 : blockBytes;
  const unsigned chunks = unsigned(std::clamp<size_t>((units + 255) / 256, 1, 64));
  queue_.launch(op, f, unsigned(count), chunks, 256, 0, list, buffer, bytes, wide);
}

void CudaBlockTransfers::gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes) {
  const size_t total = prepareBlockBuffer(blocks, count, blockBytes, "gathered block");
  launchBlockCopy("gatherBlocks", kernels_.blockCopies().first, blocks, count, blockBytes);
  memory_.download(dst, blockBuffer_.ptr(), total);
}

void CudaBlockTransfers::scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes) {
  const size_t total = prepareBlockBuffer(blocks, count, blockBytes, "scattered block");
  memory_.upload(blockBuffer_.ptr(), src, total);
  launchBlockCopy("scatterBlocks", kernels_.blockCopies().second, blocks, count, blockBytes);
}

void CudaBlockTransfers::enablePeerAccess(const CudaContext& peer) {
  if (peer.context == ctx_.context || std::find(peers_.begin(), peers_.end(), peer.device) != peers_.end()) return;
  int can = 0;
  ctx_.check(ctx_.api.cuDeviceCanAccessPeer(&can, ctx_.device, peer.device), "cuDeviceCanAccessPeer");
  if (can) {
    ctx_.makeCurrent();
    // Already enabled (by another device of this context) is fine; so is a refusal (too many
    // peers): without a peer link cuMemcpyPeerAsync still works, the driver staging it through the
    // host. Either way the question is asked once per peer.
    (void)ctx_.api.cuCtxEnablePeerAccess(peer.context, 0);
  }
  peers_.push_back(peer.device);
}

void CudaBlockTransfers::copyToPeer(const CudaContext& peer, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  queue_.flush();
  enablePeerAccess(peer);
  ctx_.makeCurrent();
  ctx_.check(ctx_.api.cuMemcpyPeerAsync(dst, peer.context, src, ctx_.context, bytes, ctx_.stream), "cuMemcpyPeerAsync");
  ctx_.synchronize();
}

void CudaBlockTransfers::moveBlocksTo(CudaBlockTransfers& peer, const uint8_t* const* from, uint8_t* const* to,
                                      size_t count, size_t blockBytes) {
  if (&peer == this) {  // within this device: gather, then scatter, in stream order
    prepareBlockBuffer(from, count, blockBytes, "gathered block");
    prepareBlockBuffer(to, count, blockBytes, "scattered block");
    launchBlockCopy("gatherBlocks", kernels_.blockCopies().first, from, count, blockBytes);
    launchBlockCopy("scatterBlocks", kernels_.blockCopies().second, to, count, blockBytes);
    queue_.flush();
    peerBlockMoves_++;
    return;
  }
  // The target's block buffer is written from this device's stream below: nothing queued there
  // may still use it (or the pages about to be overwritten).
  const size_t total = peer.prepareBlockBuffer(to, count, blockBytes, "scattered block");
  peer.queue_.drain();
  prepareBlockBuffer(from, count, blockBytes, "gathered block");
  launchBlockCopy("gatherBlocks", kernels_.blockCopies().first, from, count, blockBytes);
  copyToPeer(peer.ctx_, peer.blockBuffer_.ptr(), blockBuffer_.ptr(), total);
  peer.launchBlockCopy("scatterBlocks", peer.kernels_.blockCopies().second, to, count, blockBytes);
  peer.queue_.flush();
  peerBlockMoves_++;
}

void CudaBlockTransfers::copyToDevice(CudaBlockTransfers& peer, uint8_t* dst, const uint8_t* src, size_t bytes) {
  memory_.requireOwned(src, bytes, "copy source");
  peer.memory_.requireOwned(dst, bytes, "copy destination");
  peer.queue_.drain();
  copyToPeer(peer.ctx_, dptr(dst), dptr(src), bytes);
}

}  // namespace jitllm::cuda
