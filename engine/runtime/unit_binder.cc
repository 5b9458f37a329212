#include "engine/runtime/unit_binder.h"

#include <cstring>

#include "base/error.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "engine/runtime/unit_range.h"

namespace jitllm::runtime {

std::vector<int> evenPlacement(int layers, int devices) {
  std::vector<int> placement(size_t(layers + 2));
  for (int l = 0; l < layers; l++) placement[size_t(l + 1)] = int(int64_t(l) * devices / layers);
  placement.front() = placement[1];
  placement.back() = placement[size_t(layers)];
  return placement;
}

std::vector<size_t> UnitBinder::unitWeightBytes() const {
  const int units = unitCount();
  std::vector<size_t> weightBytes;
  for (int u = 0; u < units; u++) {
    size_t bytes = 0;
    auto add = [&](const gguf::TensorInfo* t) { bytes += t ? t->nbytes : 0; };
    if (u == 0) {
      add(tensors_.tokenEmbedding);
    } else if (u == units - 1) {
      add(tensors_.outputNorm);
      // A tied head reads the embedding table: the device running it holds a copy.
      add(tensors_.output);
    } else {
      bytes = tensors_.blocks[size_t(u - 1)].bytes();
    }
    weightBytes.push_back(bytes);
  }
  return weightBytes;
}

std::vector<BoundUnit> UnitBinder::bindAll(const ModelLoadOptions& options, size_t kvBytesPerToken,
                                           size_t workspaceBytes) const {
  JITLLM_REQUIRE(!options.devices.empty(), "a model needs at least one device");
  const int layers = int(config_.layers);
  const int units = unitCount();
  std::vector<int> placement = options.placement;
  if (placement.empty() && options.placer) {
    placement = options.placer(unitWeightBytes(), kvBytesPerToken, config_.contextLength, workspaceBytes);
  }
  const int tp = options.tensorParallel;
  JITLLM_REQUIRE(tp >= 1 && tp <= Session::kMaxShards && tp <= int(options.devices.size()), "tensor parallelism over ",
                 tp, " devices needs as many (given ", options.devices.size(), ", at most ", Session::kMaxShards, ")");
  if (tp > 1) {
    JITLLM_REQUIRE(options.placement.empty() && !options.placer && options.streamed.empty(),
                   "tensor parallelism places every unit itself: no placement, placer or streaming with it");
    placement.assign(size_t(units), 0);
  }
  if (placement.empty()) placement = evenPlacement(layers, int(options.devices.size()));
  JITLLM_REQUIRE(int(placement.size()) == units, "placement names ", placement.size(), " units, the model has ", units);
  // Other threads may drive these devices (other models' workers): uploads take turns with them.
  DeviceLocks locks(options.devices);
  std::vector<BoundUnit> bound;
  bound.reserve(size_t(units));
  for (int u = 0; u < units; u++) {
    const int d = placement[size_t(u)];
    JITLLM_REQUIRE(d >= 0 && d < int(options.devices.size()), "placement of ", unitName(u, layers), " names device #",
                   d, ", not one of the ", options.devices.size(), " given");
    const bool streamed = u < int(options.streamed.size()) && options.streamed[size_t(u)];
    JITLLM_REQUIRE(!streamed || (u > 0 && u < units - 1), "only blocks can be streamed, not ", unitName(u, layers));
    if (tp > 1 && u > 0 && u < units - 1) {
      bound.push_back(bindSplit(u, std::vector<Device*>(options.devices.begin(), options.devices.begin() + tp),
                                options.partialSums));
    } else {
      bound.push_back(bind(u, *options.devices[size_t(d)], streamed));
    }
  }
  return bound;
}

BoundUnit UnitBinder::bind(int u, Device& device, bool streamed) const {
  if (u == 0) {
    EmbeddingUnit e;
    e.binding.device = &device;
    e.table = e.binding.matrix(tensors_.tokenEmbedding);
    return BoundUnit(std::move(e));
  }
  if (u == unitCount() - 1) {
    HeadUnit h;
    h.binding.device = &device;
    h.norm = h.binding.vector(tensors_.outputNorm);
    h.output = h.binding.matrix(tensors_.output);
    return BoundUnit(std::move(h));
  }
  return BoundUnit(streamed ? bindStreamedBlock(u, device) : bindBlock(u, device));
}

BlockUnit UnitBinder::bindBlock(int u, Device& device) const {
  const int64_t qRows = config_.heads * config_.headDim, kvRows = config_.kvHeads * config_.headDim;
  const BlockTensors& t = tensors_.blocks[size_t(u - 1)];
  BlockUnit block;
  BlockShard& s = block.shards.emplace_back();
  DeviceWeights& on = s.binding;
  BlockWeights& w = s.weights;
  on.device = &device;
  w.attnNorm = on.vector(t.attnNorm);
  w.ffnNorm = on.vector(t.ffnNorm);
  if (t.wqkv) {
    w.splitFused(on.matrix(t.wqkv), qRows, kvRows, {}, 0);
  } else {
    w.wq = on.matrix(t.wq);
    w.wk = on.matrix(t.wk);
    w.wv = on.matrix(t.wv);
  }
  w.wo = on.matrix(t.wo);
  if (t.gateUp) {
    w.splitFused({}, 0, 0, on.matrix(t.gateUp), config_.feedForward);
  } else {
    w.gate = on.matrix(t.gate);
    w.up = on.matrix(t.up);
  }
  w.down = on.matrix(t.down);
  w.bq = on.vector(t.bq);
  w.bk = on.vector(t.bk);
  w.bv = on.vector(t.bv);
  w.qNorm = on.vector(t.qNorm);
  w.kNorm = on.vector(t.kNorm);
  w.attnPostNorm = on.vector(t.attnPostNorm);
  w.ffnPostNorm = on.vector(t.ffnPostNorm);
  return block;
}

BlockUnit UnitBinder::bindStreamedBlock(int u, Device& device) const {
  const int64_t qRows = config_.heads * config_.headDim, kvRows = config_.kvHeads * config_.headDim;
  const BlockTensors& t = tensors_.blocks[size_t(u - 1)];
  BlockUnit block;
  BlockShard& s = block.shards.emplace_back();
  s.binding.device = &device;
  BlockWeights& w = s.weights;
  WeightRef qkv, gateUp;  // phi3's fused matrices, split below
  // Each tensor of the block and the field that will point at it (exactly one of the two).
  struct Part {
    const gguf::TensorInfo* tensor;  // may be null (qwen2's biases on a llama model)
    WeightRef* matrix;
    const float** vector;
  };
  const Part parts[] = {{t.attnNorm, nullptr, &w.attnNorm},
                        {t.wqkv, &qkv, nullptr},
                        {t.gateUp, &gateUp, nullptr},
                        {t.ffnNorm, nullptr, &w.ffnNorm},
                        {t.wq, &w.wq, nullptr},
                        {t.wk, &w.wk, nullptr},
                        {t.wv, &w.wv, nullptr},
                        {t.wo, &w.wo, nullptr},
                        {t.gate, &w.gate, nullptr},
                        {t.up, &w.up, nullptr},
                        {t.down, &w.down, nullptr},
                        {t.bq, nullptr, &w.bq},
                        {t.bk, nullptr, &w.bk},
                        {t.bv, nullptr, &w.bv},
                        {t.qNorm, nullptr, &w.qNorm},
                        {t.kNorm, nullptr, &w.kNorm},
                        {t.attnPostNorm, nullptr, &w.attnPostNorm},
                        {t.ffnPostNorm, nullptr, &w.ffnPostNorm}};
  // The whole block, copied once into one stream source laid out as a device slot will be.
  auto aligned = [](size_t n) {
    return (n + StreamSource::kAlignment - 1) / StreamSource::kAlignment * StreamSource::kAlignment;
  };
  block.stream = std::make_unique<StreamSource>();
  StreamSource& source = *block.stream;
  for (const Part& p : parts) source.size += p.tensor ? aligned(p.tensor->nbytes) : 0;
  source.bytes = device.allocateStreamSource(source.size);
  source.base = source.bytes->data();
  size_t offset = 0;
  for (const Part& p : parts) {
    if (!p.tensor) continue;
    const gguf::TensorInfo& tensor = *p.tensor;
    uint8_t* at = source.bytes->data() + offset;
    std::memcpy(at, tensor.data, tensor.nbytes);
    s.binding.weightBytes += tensor.nbytes;
    offset += aligned(tensor.nbytes);
    if (p.matrix) {
      *p.matrix = WeightRef{tensor.type, at, tensor.rows(), tensor.dims[0], tensor.nbytes / size_t(tensor.rows())};
    } else {
      *p.vector = reinterpret_cast<const float*>(at);
    }
  }
  w.splitFused(qkv, qRows, kvRows, gateUp, config_.feedForward);
  return block;
}

BoundUnit UnitBinder::bindSplit(int u, const std::vector<Device*>& devices, bool partialSums) const {
  const ModelConfig& c = config_;
  const int k = int(devices.size());
  const std::string name = unitName(u, int(c.layers));
  JITLLM_REQUIRE(u > 0 && u <= c.layers, "only blocks split over devices, not ", name);
  JITLLM_REQUIRE(k >= 1 && k <= Session::kMaxShards, "a block splits over 1 to ", Session::kMaxShards, " devices, not ",
                 k);
  for (int i = 0; i < k; i++) {
    for (int j = 0; j < i; j++) {
      JITLLM_REQUIRE(devices[size_t(i)] != devices[size_t(j)], "tensor parallelism over ",
                     devices[size_t(i)]->info().id, " twice");
    }
  }
  JITLLM_REQUIRE(c.kvHeads % k == 0 && c.feedForward % k == 0, name, ": ", c.kvHeads, " KV heads and ", c.feedForward,
                 " FFN rows do not split over ", k, " devices");
  const BlockTensors& t = tensors_.blocks[size_t(u - 1)];
  const int64_t hd = c.headDim, heads = c.heads / k, kvHeads = c.kvHeads / k, ff = c.feedForward / k;
  const int64_t qRows = c.heads * hd, kvRows = c.kvHeads * hd;
  // The output and down projections run whole on the first device over the shards' gathered
  // outputs - the bits of one device - unless partial sums are asked for: then each shard takes
  // its columns (where they split at whole quantization blocks) and the sums are added in shard
  // order, which moves the integer kernels' activation rounding downstream (NMSE ~1e-9).
  auto columnsSplit = [&](const gguf::TensorInfo* m, int64_t part) {
    return k > 1 && part % quant::typeTraits(m->type).blockElems == 0;
  };
  BlockUnit block;
  block.partialSums = partialSums;
  block.woSplit = partialSums && columnsSplit(t.wo, heads * hd);
  block.downSplit = partialSums && columnsSplit(t.down, ff);
  block.shards.resize(size_t(k));
  for (int j = 0; j < k; j++) {
    DeviceWeights& on = block.shards[size_t(j)].binding;
    BlockWeights& w = block.shards[size_t(j)].weights;
    on.device = devices[size_t(j)];
    w.attnNorm = on.vector(t.attnNorm);
    w.ffnNorm = on.vector(t.ffnNorm);
    const int64_t q0 = j * heads * hd, kv0 = j * kvHeads * hd, f0 = j * ff;
    if (t.wqkv) {
      w.wq = on.rows(t.wqkv, q0, heads * hd);
      w.wk = on.rows(t.wqkv, qRows + kv0, kvHeads * hd);
      w.wv = on.rows(t.wqkv, qRows + kvRows + kv0, kvHeads * hd);
    } else {
      w.wq = on.rows(t.wq, q0, heads * hd);
      w.wk = on.rows(t.wk, kv0, kvHeads * hd);
      w.wv = on.rows(t.wv, kv0, kvHeads * hd);
    }
    if (t.gateUp) {
      w.gate = on.rows(t.gateUp, f0, ff);
      w.up = on.rows(t.gateUp, c.feedForward + f0, ff);
    } else {
      w.gate = on.rows(t.gate, f0, ff);
      w.up = on.rows(t.up, f0, ff);
    }
    if (block.woSplit) {
      w.wo = on.columns(t.wo, q0, heads * hd);
    } else if (j == 0) {
      w.wo = on.matrix(t.wo);
    }
    if (block.downSplit) {
      w.down = on.columns(t.down, f0, ff);
    } else if (j == 0) {
      w.down = on.matrix(t.down);
    }
    w.bq = on.vectorPart(t.bq, q0, heads * hd);
    w.bk = on.vectorPart(t.bk, kv0, kvHeads * hd);
    w.bv = on.vectorPart(t.bv, kv0, kvHeads * hd);
    w.qNorm = on.vector(t.qNorm);
    w.kNorm = on.vector(t.kNorm);
    if (j == 0) {  // applied to the whole branch output, on the first device
      w.attnPostNorm = on.vector(t.attnPostNorm);
      w.ffnPostNorm = on.vector(t.ffnPostNorm);
    }
  }
  return BoundUnit(std::move(block));
}

}  // namespace jitllm::runtime
