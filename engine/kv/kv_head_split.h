// KV pages split by KV heads over the devices of a tensor-parallel block, and joined back.
//
// A page of KvLayout holds K for pageTokens tokens, then V for as many; a token's row is kvHeads
// heads of headDim elements. Shard j of k holds heads [j H/k, (j+1) H/k) of every token in pages
// of the same token count (a layout with H/k heads), so a page's bytes re-lay by heads alone: the
// same positions, the same values, no arithmetic. What a tensor-parallel switch and parking a
// tensor-parallel session (HostKv) do to KV.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/device.h"

namespace jitllm::runtime {

// The layout of one of `shards` shards of `whole` (its heads divided evenly).
KvLayout shardLayout(const KvLayout& whole, int shards);

// `pages` pages held as `from.size()` shards (from[j]: that shard's pages back to back, in its
// shardLayout) re-laid as `to.size()` shards, each to[j] sized for `pages` pages of its layout.
// One shard on either side is the whole layout. Both counts must divide whole.kvHeads.
void relayHeads(const KvLayout& whole, size_t pages, std::span<const uint8_t* const> from,
                std::span<uint8_t* const> to);

}  // namespace jitllm::runtime
