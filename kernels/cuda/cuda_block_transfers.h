// What a migration moves off or onto one CUDA device: KV blocks gathered on the GPU into one
// buffer (gather_blocks) and moved in 8 MiB chunks through the pinned buffers to the host, or
// scattered the other way round; to another CUDA device, one peer copy between the two block
// buffers (over the peer link when the GPUs have one, enabled on first use; the driver stages it
// otherwise); and plain device-to-device copies by one peer copy.
//
// Ownership: owns the block buffer and the list of peers enabled; borrows its device's other
// parts, and in a peer transfer the peer's. Thread-safety: the executor thread, which must be the
// only one driving the peer too (Device's contract).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_kernel_set.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_op_queue.h"
#include "kernels/cuda/cuda_settings.h"

namespace jitllm::cuda {

class CudaBlockTransfers final {
 public:
  CudaBlockTransfers(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
                     const ResolvedCudaSettings& settings);

  // Whether blocks move by the block kernels (CudaSettings::blockKernels); else Device's copies.
  bool on() const { return on_; }
  // Device::gatherToHost and scatterFromHost with on(), count and blockBytes not 0.
  void gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes);
  void scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes);
  // Device::moveBlocksTo another device's (or this one's) transfers, both on(). Returns when the
  // copy has landed; the scatter is queued on the target.
  void moveBlocksTo(CudaBlockTransfers& peer, const uint8_t* const* from, uint8_t* const* to, size_t count,
                    size_t blockBytes);
  // `bytes` from this device's src to peer's dst, checked, once nothing queued there uses dst.
  void copyToDevice(CudaBlockTransfers& peer, uint8_t* dst, const uint8_t* src, size_t bytes);

  uint64_t peerBlockMoves() const { return peerBlockMoves_; }

 private:
  // Checks that each block lies whole in this device's memory and grows the block buffer to hold
  // them all; returns their total size.
  size_t prepareBlockBuffer(const uint8_t* const* blocks, size_t count, size_t blockBytes, const char* what);
  // Stages the blocks' addresses and queues f (gather_blocks or scatter_blocks) between them and
  // the block buffer, in 16-byte moves when every address and the size allow.
  void launchBlockCopy(const char* op, CUfunction f, const uint8_t* const* blocks, size_t count, size_t blockBytes);
  // Lets this context reach `peer`'s memory directly when the GPUs allow it (once per peer).
  void enablePeerAccess(const CudaContext& peer);
  // bytes from this device's src to peer's dst, after everything queued here; returns once they
  // have landed. The caller has drained the peer if its queue may use dst.
  void copyToPeer(const CudaContext& peer, CUdeviceptr dst, CUdeviceptr src, size_t bytes);

  const CudaContext& ctx_;
  CudaMemory& memory_;
  CudaOpQueue& queue_;
  CudaKernelSet& kernels_;
  bool on_ = true;
  ScratchBuffer blockBuffer_;    // gathered blocks on their way to or from the host or a peer
  std::vector<CUdevice> peers_;  // devices whose memory this context may reach (enablePeerAccess)
  uint64_t peerBlockMoves_ = 0;  // moveBlocksTo calls that moved blocks GPU to GPU
};

}  // namespace jitllm::cuda
