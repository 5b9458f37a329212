#include "engine/runtime/block_graph.h"

#include <cmath>

#include "engine/kv/kv_head_split.h"

namespace jitllm::runtime {

BlockGraph::BlockGraph(const ModelConfig& config, const KvLayout& kvLayout, std::vector<float> ropeFactors,
                       Workspaces& workspaces)
    : config_(config), kvLayout_(kvLayout), ropeFactors_(std::move(ropeFactors)), workspaces_(workspaces) {}

void BlockGraph::attentionHeads(const BlockShard& block, int layer, Workspace& ws, int64_t T, const int32_t* positions,
                                const KvSlot* slots, const uint8_t* const* const* pageTables, int heads,
                                const KvLayout& kv) {
  const ModelConfig& c = config_;
  const BlockWeights& w = block.weights;
  Device& d = *block.binding.device;
  float* x = ws.f(ws.x);
  float* normed = ws.f(ws.normed);
  float* q = ws.f(ws.q);
  float* k = ws.f(ws.k);
  float* v = ws.f(ws.v);
  float* attn = ws.f(ws.attn);

  d.rmsNorm(x, w.attnNorm, normed, T, c.embedding, c.rmsEps);
  const MatmulTarget qkv[] = {{w.wq, q, w.bq}, {w.wk, k, w.bk}, {w.wv, v, w.bv}};
  d.matmuls(qkv, normed, T);
  if (w.qNorm) {
    // Each head of q and k normalised on its own (qwen3), out of place: q into `normed` (free
    // once the products above have read it), k into `attn` (free until attention writes it,
    // after k is in the cache).
    d.rmsNorm(q, w.qNorm, normed, T * heads, c.headDim, c.rmsEps);
    d.rmsNorm(k, w.kNorm, attn, T * kv.kvHeads, c.headDim, c.rmsEps);
    q = normed;
    k = attn;
  }
  // Sliding-window layers (gemma3) attend to their window only, with rope of their own.
  const bool sliding = c.slidingLayer(layer);
  RopeParams rope;
  rope.rotaryDims = int(c.rotaryDims);
  rope.freqBase = sliding ? c.ropeFreqBaseSliding : c.ropeFreqBase;
  rope.freqScale = sliding ? c.ropeFreqScaleSliding : c.ropeFreqScale;
  rope.freqFactors = ropeFactors_.empty() ? nullptr : ropeFactors_.data();
  rope.neox = c.ropeNeox;
  rope.attnFactor = c.ropeAttnFactor;
  d.ropeAndStore(q, k, v, T, heads, kv.kvHeads, positions, rope, slots, kv);
  AttentionBatch batch;
  batch.tokens = T;
  batch.heads = heads;
  batch.kv = kv;
  batch.scale = c.attentionScale != 0 ? c.attentionScale : float(1.0 / std::sqrt(double(c.headDim)));
  batch.positions = positions;
  batch.pageTables = pageTables;
  batch.window = sliding ? int(c.slidingWindow) : 0;
  d.attention(q, attn, batch);
}

void BlockGraph::ffnHidden(const BlockShard& block, Workspace& ws, int64_t T, int64_t rows) {
  const ModelConfig& c = config_;
  const BlockWeights& w = block.weights;
  Device& d = *block.binding.device;
  float* gate = ws.f(ws.gate);
  float* up = ws.f(ws.up);
  d.rmsNorm(ws.f(ws.x), w.ffnNorm, ws.f(ws.normed), T, c.embedding, c.rmsEps);
  const MatmulTarget gateUp[] = {{w.gate, gate, nullptr}, {w.up, up, nullptr}};
  d.matmuls(gateUp, ws.f(ws.normed), T);
  if (c.geluFfn) {
    d.geglu(gate, up, gate, T * rows);
  } else {
    d.swiglu(gate, up, gate, T * rows);
  }
}

void BlockGraph::joinResidual(Device& d, Workspace& ws, float* branch, const float* postNorm, float* spare, int64_t T) {
  const ModelConfig& c = config_;
  // A branch's output joins the residual through its post norm (gemma3), written to a buffer the
  // block does not need any more (gate or up: at least embedding wide).
  if (postNorm) {
    d.rmsNorm(branch, postNorm, spare, T, c.embedding, c.rmsEps);
    branch = spare;
  }
  if (c.residualScale != 0) d.scale(branch, c.residualScale, T * c.embedding);
  d.add(ws.f(ws.x), branch, T * c.embedding);
}

void BlockGraph::run(const BlockShard& block, int layer, Workspace& ws, int64_t T, const int32_t* positions,
                     const BlockKv& kv) {
  const ModelConfig& c = config_;
  const BlockWeights& w = block.weights;
  Device& d = *block.binding.device;
  attentionHeads(block, layer, ws, T, positions, kv.slots[0], kv.pageTables[0], int(c.heads), kvLayout_);
  d.matmul(w.wo, ws.f(ws.attn), T, ws.f(ws.normed), nullptr);
  joinResidual(d, ws, ws.f(ws.normed), w.attnPostNorm, ws.f(ws.gate), T);
  ffnHidden(block, ws, T, c.feedForward);
  d.matmul(w.down, ws.f(ws.gate), T, ws.f(ws.normed), nullptr);
  joinResidual(d, ws, ws.f(ws.normed), w.ffnPostNorm, ws.f(ws.up), T);
}

void BlockGraph::runSplit(const BlockUnit& block, int layer, int64_t T, const int32_t* positions, const BlockKv& kv) {
  const ModelConfig& c = config_;
  const std::vector<BlockShard>& shard = block.shards;
  const int k = int(shard.size());
  std::vector<Workspace*>& ws = shardWorkspaces_;
  ws.clear();
  for (const BlockShard& s : shard) ws.push_back(&workspaces_.get(*s.binding.device, T));
  Device& first = *shard[0].binding.device;
  const BlockWeights& w = shard[0].weights;
  Workspace& w0 = *ws[0];
  const size_t rowBytes = size_t(T * c.embedding) * sizeof(float);
  uint8_t* partial = w0.partialFor(T, rowBytes);
  // The hidden state lives on the first device; the others get a copy before each branch.
  auto broadcast = [&] {
    for (int j = 1; j < k; j++) {
      first.copyToDevice(*shard[size_t(j)].binding.device, ws[size_t(j)]->x->data(), w0.x->data(), rowBytes);
    }
  };
  // The shards' partial sums of a split product, added on the first device in shard order.
  auto reduce = [&](std::unique_ptr<DeviceBuffer> Workspace::*buffer) {
    for (int j = 1; j < k; j++) {
      shard[size_t(j)].binding.device->copyToDevice(first, partial, (ws[size_t(j)]->*buffer)->data(), rowBytes);
      first.add(w0.f(w0.*buffer), reinterpret_cast<const float*>(partial), T * c.embedding);
    }
  };
  // The shards' outputs (`width` columns each) side by side in the first device's `buffer`, for a
  // product that runs there whole: stacked on the first device (one copy a shard, a peer copy
  // between GPUs), then interleaved row by row by one getRows over them as a table of f32 rows.
  order_.resize(size_t(T * k));
  for (int64_t t = 0; t < T; t++) {
    for (int j = 0; j < k; j++) order_[size_t(t * k + j)] = int32_t(j * T + t);
  }
  auto gather = [&](std::unique_ptr<DeviceBuffer> Workspace::*buffer, int64_t width) {
    const size_t part = size_t(T * width) * sizeof(float);
    uint8_t* stacked = w0.stackedFor(part * size_t(k));
    for (int j = 0; j < k; j++) {
      shard[size_t(j)].binding.device->copyToDevice(first, stacked + size_t(j) * part, (ws[size_t(j)]->*buffer)->data(),
                                                    part);
    }
    const WeightRef rows{quant::TensorType::kF32, stacked, T * k, width, size_t(width) * sizeof(float)};
    first.getRows(rows, order_.data(), T * k, w0.f(w0.*buffer));
  };
  // Each shard's own product of the branch output (its columns), or the whole one on the first.
  auto project = [&](bool split, WeightRef BlockWeights::*matrix, std::unique_ptr<DeviceBuffer> Workspace::*input,
                     int64_t width) {
    if (split) {
      for (int j = 0; j < k; j++) {
        Workspace& wj = *ws[size_t(j)];
        shard[size_t(j)].binding.device->matmul(shard[size_t(j)].weights.*matrix, wj.f(wj.*input), T, wj.f(wj.normed),
                                                nullptr);
      }
      reduce(&Workspace::normed);
    } else {
      gather(input, width);
      first.matmul(w.*matrix, w0.f(w0.*input), T, w0.f(w0.normed), nullptr);
    }
  };

  const int heads = int(c.heads) / k;
  const KvLayout shardKv = shardLayout(kvLayout_, k);
  broadcast();
  for (int j = 0; j < k; j++) {
    attentionHeads(shard[size_t(j)], layer, *ws[size_t(j)], T, positions, kv.slots[j], kv.pageTables[j], heads,
                   shardKv);
  }
  project(block.woSplit, &BlockWeights::wo, &Workspace::attn, heads * c.headDim);
  joinResidual(first, w0, w0.f(w0.normed), w.attnPostNorm, w0.f(w0.gate), T);

  const int64_t ff = c.feedForward / k;
  broadcast();
  for (int j = 0; j < k; j++) ffnHidden(shard[size_t(j)], *ws[size_t(j)], T, ff);
  project(block.downSplit, &BlockWeights::down, &Workspace::gate, ff);
  joinResidual(first, w0, w0.f(w0.normed), w.ffnPostNorm, w0.f(w0.up), T);
}

}  // namespace jitllm::runtime
