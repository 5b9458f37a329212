#include "kernels/vulkan/memory_pool.h"

#include <algorithm>

#include "base/error.h"

namespace jitllm::vulkan {

struct MemoryBlock {
  RawBuffer raw;
  bool dedicated = false;
  std::map<VkDeviceSize, VkDeviceSize> freeRanges;  // offset -> size, coalesced
  std::map<VkDeviceSize, VkDeviceSize> liveRanges;  // offset -> size of each allocation
  size_t live = 0;
};

namespace {

constexpr VkBufferUsageFlags kUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;

VkDeviceSize roundUp(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

}  // namespace

uint32_t findMemoryType(const DeviceContext& ctx, VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred,
                        VkMemoryPropertyFlags avoid) {
  // Which types a buffer with our usage may live in.
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = 4096;
  bi.usage = kUsage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer probe;
  ctx.check(ctx.fn.vkCreateBuffer(ctx.device, &bi, nullptr, &probe), "vkCreateBuffer");
  VkMemoryRequirements req;
  ctx.fn.vkGetBufferMemoryRequirements(ctx.device, probe, &req);
  ctx.fn.vkDestroyBuffer(ctx.device, probe, nullptr);

  VkPhysicalDeviceMemoryProperties props;
  ctx.instance->fn().vkGetPhysicalDeviceMemoryProperties(ctx.physical->handle, &props);
  uint32_t best = UINT32_MAX;
  int bestScore = -1;
  for (uint32_t i = 0; i < props.memoryTypeCount; i++) {
    if (!(req.memoryTypeBits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = props.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    // Larger heaps first among equals: a 256 MiB BAR window must not win over all of VRAM.
    const int score = (((f & preferred) == preferred) ? 4 : 0) + ((f & avoid) ? 0 : 2);
    const bool better =
        score > bestScore || (score == bestScore && props.memoryHeaps[props.memoryTypes[i].heapIndex].size >
                                                        props.memoryHeaps[props.memoryTypes[best].heapIndex].size);
    if (better) {
      best = i;
      bestScore = score;
    }
  }
  return best;
}

RawBuffer createRawBuffer(const DeviceContext& ctx, VkDeviceSize bytes, uint32_t memoryType, bool map) {
  RawBuffer b;
  b.size = bytes;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = bytes;
  bi.usage = kUsage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  ctx.check(ctx.fn.vkCreateBuffer(ctx.device, &bi, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  ctx.fn.vkGetBufferMemoryRequirements(ctx.device, b.buffer, &req);
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.pNext = &flags;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = memoryType;
  const VkResult r = ctx.fn.vkAllocateMemory(ctx.device, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    ctx.fn.vkDestroyBuffer(ctx.device, b.buffer, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
      JITLLM_FAIL(kOverloaded, ctx.id, ": the driver has no memory for ", bytes, " more bytes (", vkResultName(r), ")");
    }
    ctx.check(r, "vkAllocateMemory");
  }
  ctx.check(ctx.fn.vkBindBufferMemory(ctx.device, b.buffer, b.memory, 0), "vkBindBufferMemory");
  VkBufferDeviceAddressInfo addr{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  addr.buffer = b.buffer;
  b.address = ctx.fn.vkGetBufferDeviceAddress(ctx.device, &addr);
  if (map) {
    void* p = nullptr;
    ctx.check(ctx.fn.vkMapMemory(ctx.device, b.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    b.host = static_cast<uint8_t*>(p);
  }
  return b;
}

void destroyRawBuffer(const DeviceContext& ctx, RawBuffer& b) {
  if (b.host) ctx.fn.vkUnmapMemory(ctx.device, b.memory);
  if (b.buffer) ctx.fn.vkDestroyBuffer(ctx.device, b.buffer, nullptr);
  if (b.memory) ctx.fn.vkFreeMemory(ctx.device, b.memory, nullptr);
  b = RawBuffer{};
}

MemoryPool::MemoryPool(const DeviceContext& ctx, uint32_t memoryType, bool hostVisible, VkDeviceSize blockBytes)
    : ctx_(ctx), memoryType_(memoryType), hostVisible_(hostVisible), blockBytes_(roundUp(blockBytes, kAlignment)) {}

MemoryPool::~MemoryPool() {
  for (auto& b : blocks_) destroyRawBuffer(ctx_, b->raw);
}

MemoryBlock* MemoryPool::newBlock(VkDeviceSize bytes, bool dedicated) {
  auto block = std::make_unique<MemoryBlock>();
  block->raw = createRawBuffer(ctx_, bytes, memoryType_, hostVisible_);
  block->dedicated = dedicated;
  block->freeRanges[0] = bytes;
  reserved_ += bytes;
  MemoryBlock* p = block.get();
  byAddress_[p->raw.address] = p;
  blocks_.push_back(std::move(block));
  return p;
}

void MemoryPool::destroyBlock(MemoryBlock* block) {
  reserved_ -= block->raw.size;
  byAddress_.erase(block->raw.address);
  destroyRawBuffer(ctx_, block->raw);
  blocks_.erase(std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& b) { return b.get() == block; }));
}

Allocation MemoryPool::allocate(VkDeviceSize bytes) {
  const VkDeviceSize size = roundUp(std::max<VkDeviceSize>(bytes, 1), kAlignment);
  auto take = [&](MemoryBlock* b, std::map<VkDeviceSize, VkDeviceSize>::iterator it) {
    const VkDeviceSize offset = it->first, rest = it->second - size;
    b->freeRanges.erase(it);
    if (rest) b->freeRanges[offset + size] = rest;
    b->liveRanges[offset] = size;
    b->live++;
    return Allocation{b, offset, size, b->raw.address + offset};
  };
  if (size > blockBytes_ / 2) {
    MemoryBlock* b = newBlock(size, true);
    return take(b, b->freeRanges.begin());
  }
  for (auto& b : blocks_) {
    if (b->dedicated) continue;
    for (auto it = b->freeRanges.begin(); it != b->freeRanges.end(); ++it) {
      if (it->second >= size) return take(b.get(), it);
    }
  }
  MemoryBlock* b = newBlock(blockBytes_, false);
  return take(b, b->freeRanges.begin());
}

void MemoryPool::free(const Allocation& a) {
  MemoryBlock* b = a.block;
  JITLLM_ASSERT(b != nullptr && b->live > 0);
  b->liveRanges.erase(a.offset);
  b->live--;
  if (b->live == 0) {
    destroyBlock(b);  // an empty block goes back to the driver (also shared ones: budgets are tight)
    return;
  }
  auto next = b->freeRanges.lower_bound(a.offset);
  VkDeviceSize offset = a.offset, size = a.size;
  if (next != b->freeRanges.end() && offset + size == next->first) {
    size += next->second;
    next = b->freeRanges.erase(next);
  }
  if (next != b->freeRanges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += size;
      return;
    }
  }
  b->freeRanges[offset] = size;
}

const MemoryBlock* MemoryPool::find(uint64_t address) const {
  auto it = byAddress_.upper_bound(address);
  if (it == byAddress_.begin()) return nullptr;
  --it;
  const MemoryBlock* b = it->second;
  return address < b->raw.address + b->raw.size ? b : nullptr;
}

bool MemoryPool::contains(uint64_t address, uint64_t bytes) const {
  const MemoryBlock* b = find(address);
  if (!b) return false;
  // Inside one live allocation: a range running from one buffer into the next (or into free
  // space) is a caller's bug that would otherwise corrupt a neighbour silently.
  const VkDeviceSize offset = address - b->raw.address;
  auto it = b->liveRanges.upper_bound(offset);
  if (it == b->liveRanges.begin()) return false;
  --it;
  return offset + bytes <= it->first + it->second;
}

LocatedRange MemoryPool::locate(uint64_t address, uint64_t bytes) const {
  const MemoryBlock* b = find(address);
  JITLLM_REQUIRE(b && address + bytes <= b->raw.address + b->raw.size, ctx_.id, ": address 0x", std::hex, address,
                 std::dec, " (+", bytes, " bytes) is not memory of this device");
  const VkDeviceSize offset = address - b->raw.address;
  return LocatedRange{b->raw.buffer, offset, b->raw.host ? b->raw.host + offset : nullptr};
}

MemoryTypes chooseMemoryTypes(const DeviceContext& ctx) {
  MemoryTypes t;
  constexpr VkMemoryPropertyFlags kHostCached =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT | VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  if (ctx.physical->type != VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
    t.buffers = findMemoryType(ctx, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | kHostCached, 0);
    t.mapped = t.buffers != UINT32_MAX;
  }
  if (t.buffers == UINT32_MAX) {
    t.buffers = findMemoryType(ctx, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  }
  if (t.buffers == UINT32_MAX) t.buffers = findMemoryType(ctx, 0, 0);
  t.arena = findMemoryType(ctx, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                           VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  JITLLM_REQUIRE(t.buffers != UINT32_MAX && t.arena != UINT32_MAX, ctx.id,
                 ": no memory type for storage buffers with device addresses");
  return t;
}

}  // namespace jitllm::vulkan
