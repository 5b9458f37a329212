#include "engine/runtime/unit_warm_up.h"

#include <algorithm>

#include "engine/kv/kv_head_split.h"
#include "engine/runtime/model.h"

namespace jitllm::runtime {
namespace {

// Gives scratch KV pages back to their pools however the warm-up ends.
struct ScratchPages {
  std::vector<std::pair<KvPagePool*, PageId>> pages;
  ScratchPages() = default;
  ScratchPages(const ScratchPages&) = delete;
  ScratchPages& operator=(const ScratchPages&) = delete;
  ~ScratchPages() {
    for (auto [pool, page] : pages) pool->free(page);
  }
  uint8_t* take(KvPagePool& pool) {
    pages.push_back({&pool, pool.allocate()});
    return pool.address(pages.back().second);
  }
};

// One token's hidden state of zeros (`width` floats), the warm-up's input.
void zeroInput(Device& device, Workspace& ws, int64_t width) {
  const std::vector<float> zeros(static_cast<size_t>(width), 0.0f);
  device.copyFromHost(ws.x->data(), zeros.data(), zeros.size() * sizeof(float));
}

// Waits for the ops queued on `device` (GPU): a copy back of one float.
void sync(Device& device, const Workspace& ws) {
  float sink = 0;
  device.copyToHost(&sink, ws.x->data(), sizeof(float));
}

}  // namespace

namespace {
constexpr int64_t kTokens = Model::kMaxStepTokens;

KernelWorkload anyStep() {
  KernelWorkload w;
  w.maxTokens = kTokens;
  w.elementwise = true;
  return w;
}

// A table of f32 rows `width` wide (activations gathered by getRows).
WeightRef rowsTable(int64_t rows, int64_t width) {
  return WeightRef{quant::TensorType::kF32, nullptr, rows, width, size_t(width) * sizeof(float)};
}
}  // namespace

KernelWorkload UnitWarmUp::workload(const BoundUnit& bound, size_t shard) const {
  KernelWorkload w = anyStep();
  switch (bound.kind()) {
    case UnitKind::kEmbedding:
      w.tables.push_back(bound.embedding().table);
      return w;
    case UnitKind::kBlock:
      return blockWorkload(bound.block(), shard);
    case UnitKind::kHead:
      w.normDims.push_back(config_.embedding);
      w.products.push_back({bound.head().output});
      // The rows that asked for logits, gathered out of a mixed step (StepExecutor::runHead).
      w.tables.push_back(rowsTable(kTokens, config_.embedding));
      w.candidates = true;
      return w;
  }
  JITLLM_ASSERT(false);
}

KernelWorkload UnitWarmUp::blockWorkload(const BlockUnit& block, size_t shard) const {
  const ModelConfig& c = config_;
  KernelWorkload w = anyStep();
  const BlockWeights& b = block.shards[shard].weights;
  const int shards = int(block.shards.size());
  w.products = {{b.wq, b.wk, b.wv}, {b.gate, b.up}};
  if (b.wo.rows > 0) w.products.push_back({b.wo});
  if (b.down.rows > 0) w.products.push_back({b.down});
  // A split block's first device interleaves the shards' outputs of what it runs whole
  // (BlockGraph::runSplit): f32 rows of one shard's width.
  if (shards > 1 && shard == 0 && !block.woSplit) {
    w.tables.push_back(rowsTable(kTokens * shards, c.heads / shards * c.headDim));
  }
  if (shards > 1 && shard == 0 && !block.downSplit) {
    w.tables.push_back(rowsTable(kTokens * shards, c.feedForward / shards));
  }
  w.attention.push_back({int(c.heads) / shards, shardLayout(kvLayout_, shards), int(c.rotaryDims), c.ropeNeox});
  w.normDims.push_back(c.embedding);
  if (b.qNorm) w.normDims.push_back(c.headDim);
  return w;
}

size_t UnitWarmUp::prepareAll(std::vector<BoundUnit>& units,
                              const std::function<void(size_t done, size_t total)>& progress) {
  std::vector<Device*> devices;
  std::vector<KernelWorkload> workloads;
  for (const BoundUnit& b : units) {
    if (b.streamed()) continue;  // its weights move between slots; the first step makes its kernels
    size_t shard = 0;
    b.forEachBinding([&](const DeviceWeights& on) {
      const KernelWorkload w = workload(b, shard++);
      auto it = std::find(devices.begin(), devices.end(), on.device);
      if (it == devices.end()) {
        devices.push_back(on.device);
        workloads.push_back(w);
        return;
      }
      KernelWorkload& all = workloads[size_t(it - devices.begin())];
      all.products.insert(all.products.end(), w.products.begin(), w.products.end());
      all.tables.insert(all.tables.end(), w.tables.begin(), w.tables.end());
      all.attention.insert(all.attention.end(), w.attention.begin(), w.attention.end());
      all.normDims.insert(all.normDims.end(), w.normDims.begin(), w.normDims.end());
      all.candidates = all.candidates || w.candidates;
    });
  }
  const DeviceLocks locks(devices);
  size_t made = 0;
  for (size_t i = 0; i < devices.size(); i++) {
    made += devices[i]->prepareKernels(workloads[i]);
    if (progress) progress(i + 1, devices.size());
  }
  for (size_t u = 0; u < units.size(); u++) warm(int(u), units[u], true);
  return made;
}

void UnitWarmUp::warm(int unit, BoundUnit& bound, bool prepared) {
  if (bound.streamed()) return;  // its weights are not on the device between steps; the first step compiles
  if (bound.isBlock() && bound.block().split()) {
    warmSplit(unit, bound.block(), prepared);
    return;
  }
  DeviceWeights& on = bound.primary();
  Device& d = *on.device;
  if (!prepared) d.prepareKernels(workload(bound, 0));
  Workspace& ws = workspaces_.get(d, 1);
  if (d.info().caps.kernelsCompiledIn) {
    if (bound.isBlock()) pools_.get(d, 1);  // what a step there needs, minus running it
    on.kernelsReady = true;                 // compiled in
    return;
  }
  const int64_t E = config_.embedding;
  if (bound.kind() == UnitKind::kEmbedding) {
    const int32_t id = 0;
    d.getRows(bound.embedding().table, &id, 1, ws.f(ws.x));
  } else if (bound.kind() == UnitKind::kHead) {
    const HeadUnit& head = bound.head();
    zeroInput(d, ws, E);
    d.rmsNorm(ws.f(ws.x), head.norm, ws.f(ws.normed), 1, E, config_.rmsEps);
    d.matmul(head.output, ws.f(ws.normed), 1, ws.logitsFor(1, config_.vocabSize), nullptr);
  } else {
    warmBlock(unit, bound.block().shards.front(), ws);
  }
  sync(d, ws);
  on.kernelsReady = true;
}

void UnitWarmUp::warmBlock(int unit, BlockShard& block, Workspace& ws) {
  // One token at position 0 through the block, its KV written to a scratch page.
  Device& d = *block.binding.device;
  ScratchPages scratch;
  const uint8_t* page = scratch.take(pools_.get(d, 1));
  const uint8_t* const* table = &page;
  BlockKv kv;
  const KvSlot slot{const_cast<uint8_t*>(page), 0};
  kv.slots[0] = &slot;
  kv.pageTables[0] = &table;
  const int32_t position = 0;
  zeroInput(d, ws, config_.embedding);
  graph_.run(block, unit - 1, ws, 1, &position, kv);
}

void UnitWarmUp::warmSplit(int unit, BlockUnit& block, bool prepared) {
  // One token at position 0 through the split block, each shard's KV written to a scratch page.
  const int shards = int(block.shards.size());
  ScratchPages scratch;
  const uint8_t* pages[Session::kMaxShards] = {};
  const uint8_t* const* tables[Session::kMaxShards] = {};
  KvSlot slots[Session::kMaxShards];
  BlockKv kv;
  for (int j = 0; j < shards; j++) {
    Device& d = *block.shards[size_t(j)].binding.device;
    if (!prepared) d.prepareKernels(blockWorkload(block, size_t(j)));
    workspaces_.get(d, 1);
    pages[j] = scratch.take(pools_.get(d, shards));
  }
  for (int j = 0; j < shards; j++) {
    slots[j] = KvSlot{const_cast<uint8_t*>(pages[j]), 0};
    tables[j] = &pages[j];
    kv.slots[j] = &slots[j];
    kv.pageTables[j] = &tables[j];
  }
  Device& first = *block.shards.front().binding.device;
  Workspace& ws = workspaces_.get(first, 1);
  zeroInput(first, ws, config_.embedding);
  const int32_t position = 0;
  graph_.runSplit(block, unit - 1, 1, &position, kv);
  sync(first, ws);
  for (BlockShard& s : block.shards) s.binding.kernelsReady = true;
}

}  // namespace jitllm::runtime
