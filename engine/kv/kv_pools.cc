#include "engine/kv/kv_pools.h"

#include "base/error.h"
#include "engine/kv/kv_head_split.h"

namespace jitllm::runtime {

KvPagePool& KvPools::get(Device& device, int shards) {
  auto& pool = pools_[{&device, shards}];
  if (!pool) pool = std::make_unique<KvPagePool>(device, shardLayout(whole_, shards));
  return *pool;
}

std::vector<const KvPagePool*> KvPools::all() const {
  std::vector<const KvPagePool*> out;
  for (const auto& [key, pool] : pools_) out.push_back(pool.get());
  return out;
}

void KvPools::appendDevices(std::vector<Device*>& out) const {
  for (const auto& [key, pool] : pools_) out.push_back(key.first);
}

void KvPools::release(Device& device) {
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (it->first.first != &device) {
      ++it;
      continue;
    }
    JITLLM_REQUIRE(it->second->pagesInUse() == 0, it->second->pagesInUse(), " KV pages are still in use on ",
                   device.info().id);
    it = pools_.erase(it);
  }
}

}  // namespace jitllm::runtime
