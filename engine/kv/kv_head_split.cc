#include "engine/kv/kv_head_split.h"

#include <cstring>

#include "base/error.h"

namespace jitllm::runtime {

KvLayout shardLayout(const KvLayout& whole, int shards) {
  JITLLM_REQUIRE(shards > 0 && whole.kvHeads % shards == 0, whole.kvHeads, " KV heads do not split over ", shards,
                 " devices");
  KvLayout l = whole;
  l.kvHeads = whole.kvHeads / shards;
  return l;
}

void relayHeads(const KvLayout& whole, size_t pages, std::span<const uint8_t* const> from,
                std::span<uint8_t* const> to) {
  const KvLayout src = shardLayout(whole, int(from.size())), dst = shardLayout(whole, int(to.size()));
  const size_t headBytes = size_t(whole.headDim) * whole.elementBytes();
  // Rows of one page: K's tokens, then V's; a row of shard j holds its heads in order.
  const size_t rows = 2 * size_t(whole.pageTokens);
  for (size_t p = 0; p < pages; p++) {
    for (size_t r = 0; r < rows; r++) {
      for (int h = 0; h < whole.kvHeads; h++) {
        const int sj = h / src.kvHeads, sh = h % src.kvHeads;
        const int dj = h / dst.kvHeads, dh = h % dst.kvHeads;
        const uint8_t* in = from[size_t(sj)] + p * src.pageBytes() + r * src.tokenBytes() + size_t(sh) * headBytes;
        uint8_t* out = to[size_t(dj)] + p * dst.pageBytes() + r * dst.tokenBytes() + size_t(dh) * headBytes;
        std::memcpy(out, in, headBytes);
      }
    }
  }
}

}  // namespace jitllm::runtime
