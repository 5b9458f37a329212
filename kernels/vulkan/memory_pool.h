// Device memory for one Vulkan device: large blocks (VkDeviceMemory + one VkBuffer spanning it,
// with a device address), carved into allocations by first fit with coalescing free lists.
//
// Every allocation is known by its device address, which is what the Device interface hands out
// as a pointer; locate() maps any address inside an allocation back to (VkBuffer, offset) for
// copies, and host-visible pools also to a host pointer. Requests of more than half a block get a
// block of their own (returned to the driver when freed); empty shared blocks are returned too.
//
// Ownership: owns its blocks; allocations must be freed before the pool is destroyed.
// Thread-safety: one thread at a time (the device's executor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kernels/vulkan/device_context.h"

namespace jitllm::vulkan {

struct MemoryBlock;

struct Allocation {
  MemoryBlock* block = nullptr;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
  uint64_t address = 0;
};

struct LocatedRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  uint8_t* host = nullptr;  // null unless the pool is host-visible
};

class MemoryPool final {
 public:
  // Granularity of every allocation: enough for 16-byte vector loads and for any
  // minStorageBufferOffsetAlignment a driver reports (at most 256).
  static constexpr VkDeviceSize kAlignment = 256;

  MemoryPool(const DeviceContext& ctx, uint32_t memoryType, bool hostVisible, VkDeviceSize blockBytes);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Throws Error(OVERLOADED) when the driver has no memory for it.
  Allocation allocate(VkDeviceSize bytes);
  void free(const Allocation& allocation);

  // Throws Error(FAILED) when [address, address + bytes) is not inside one block of this pool.
  LocatedRange locate(uint64_t address, uint64_t bytes) const;
  // Whether [address, address + bytes) lies inside one live allocation (ops check every range
  // they are given against it).
  bool contains(uint64_t address, uint64_t bytes) const;

  bool hostVisible() const { return hostVisible_; }
  VkDeviceSize reservedBytes() const { return reserved_; }  // taken from the driver

 private:
  MemoryBlock* newBlock(VkDeviceSize bytes, bool dedicated);
  void destroyBlock(MemoryBlock* block);
  const MemoryBlock* find(uint64_t address) const;

  const DeviceContext& ctx_;
  uint32_t memoryType_;
  bool hostVisible_;
  VkDeviceSize blockBytes_;
  VkDeviceSize reserved_ = 0;
  std::vector<std::unique_ptr<MemoryBlock>> blocks_;
  std::map<uint64_t, MemoryBlock*> byAddress_;
};

// A buffer with a device address in memory of the given type: used for the pools' blocks and
// for the host-visible upload arena. Throws Error(OVERLOADED) when memory is short.
struct RawBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t address = 0;
  uint8_t* host = nullptr;
  VkDeviceSize size = 0;
};
RawBuffer createRawBuffer(const DeviceContext& ctx, VkDeviceSize bytes, uint32_t memoryType, bool map);
void destroyRawBuffer(const DeviceContext& ctx, RawBuffer& buffer);

// The memory type index with all of `required` (preferring also `preferred`) that buffers can
// use, or UINT32_MAX.
uint32_t findMemoryType(const DeviceContext& ctx, VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred,
                        VkMemoryPropertyFlags avoid = 0);

// The memory types of one device's pools: where device-local memory is also host-cached (lavapipe,
// integrated GPUs) buffers live there, mapped, and copies are memcpy; on a discrete GPU VRAM stays
// unmapped and copies stage through the upload arena (host-visible, coherent). Throws
// Error(FAILED) when the device has no type buffers with device addresses can use.
struct MemoryTypes {
  uint32_t buffers = UINT32_MAX;
  bool mapped = false;  // buffers are host-visible
  uint32_t arena = UINT32_MAX;
};
MemoryTypes chooseMemoryTypes(const DeviceContext& ctx);

}  // namespace jitllm::vulkan
