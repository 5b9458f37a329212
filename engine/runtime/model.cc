#include "engine/runtime/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "base/error.h"
#include "engine/kv/kv_head_split.h"
#include "engine/runtime/bound_unit.h"
#include "engine/runtime/unit_range.h"
#include "engine/tokenizer/vocab_from_gguf.h"

namespace jitllm::runtime {

// Activation buffers on one device, sized for the largest microbatch seen so far.
struct Model::Workspace {
  Device* device = nullptr;
  int64_t capacity = 0;
  int64_t logitsCapacity = 0;  // rows; decode needs one per session, scoring one per token
  std::unique_ptr<DeviceBuffer> x, normed, q, k, v, attn, gate, up, logits;
  // A split block's partial sums from another device, before they are added (Model::runSplitBlock).
  std::unique_ptr<DeviceBuffer> partial;
  int64_t partialCapacity = 0;
  // ... and the shards' outputs stacked before a product that runs whole on the first device.
  std::unique_ptr<DeviceBuffer> stacked;
  size_t stackedBytes = 0;
  // Streamed blocks visit two slots in turn: while one block runs from one, the next uploads into
  // the other. slotFree[s]: the mark after the ops of the block that last used slot s.
  std::unique_ptr<DeviceBuffer> slots[2];
  size_t slotBytes = 0;
  uint64_t slotFree[2] = {0, 0};
  int nextSlot = 0;
  std::map<int, std::pair<int, uint64_t>> inFlight;  // unit -> (slot, upload ticket)

  float* f(const std::unique_ptr<DeviceBuffer>& b) { return reinterpret_cast<float*>(b->data()); }
};

std::unique_ptr<Model> Model::load(const std::string& path, const ModelLoadOptions& options) {
  return fromFile(gguf::GgufFile::open(path), options);
}

std::unique_ptr<Model> Model::fromFile(std::unique_ptr<gguf::GgufFile> file, const ModelLoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  m->config_ = ModelConfig::fromGguf(*m->file_);
  JITLLM_REQUIRE(options.contextSize >= 0, "context size ", options.contextSize, " is negative");
  m->config_.servedContext =
      options.contextSize > 0 ? std::min(options.contextSize, m->config_.contextLength) : m->config_.contextLength;
  m->tensors_ = ModelTensors::find(*m->file_, m->config_);
  if (m->file_->find("tokenizer.ggml.model")) {
    m->tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::vocabFromGguf(*m->file_));
    JITLLM_REQUIRE(m->tokenizer_->vocabSize() == m->config_.vocabSize, m->file_->name(), ": the tokenizer has ",
                   m->tokenizer_->vocabSize(), " tokens but the embedding has ", m->config_.vocabSize, " rows");
  }
  if (m->tensors_.ropeFreqs) {
    const auto* f = reinterpret_cast<const float*>(m->tensors_.ropeFreqs->data);
    m->ropeFactors_.assign(f, f + m->config_.rotaryDims / 2);
    for (float v : m->ropeFactors_) {
      JITLLM_REQUIRE(std::isfinite(v) && v > 0, m->file_->name(), ": tensor '", m->tensors_.ropeFreqs->name, "' holds ",
                     v, ", not a positive factor");
    }
  }
  JITLLM_REQUIRE(options.kvPageTokens > 0 && options.kvPageTokens <= 4096, "KV page size ", options.kvPageTokens,
                 " tokens is out of range");
  m->kvLayout_ = KvLayout{options.kvPageTokens, int(m->config_.kvHeads), int(m->config_.headDim), options.kvPrecision};
  m->bind(options);
  return m;
}

Model::~Model() = default;

const tokenizer::Tokenizer& Model::tokenizer() const {
  JITLLM_REQUIRE(tokenizer_ != nullptr, file_->name(), ": the file has no tokenizer (tokenizer.ggml.* keys)");
  return *tokenizer_;
}

std::vector<int> evenPlacement(int layers, int devices) {
  std::vector<int> placement(size_t(layers + 2));
  for (int l = 0; l < layers; l++) placement[size_t(l + 1)] = int(int64_t(l) * devices / layers);
  placement.front() = placement[1];
  placement.back() = placement[size_t(layers)];
  return placement;
}

int Model::unitCount() const { return int(units_.size()); }

std::vector<Device*> Model::devices() const {
  std::vector<Device*> out;
  for (const BoundUnit& u : units_) {
    out.push_back(u.device);
    for (const BoundUnit& p : u.peers) out.push_back(p.device);
  }
  for (const auto& [key, pool] : pools_) out.push_back(key.first);
  for (const auto& [device, ws] : workspaces_) out.push_back(device);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}
Device& Model::unitDevice(int unit) const { return *units_.at(size_t(unit)).device; }

UnitInfo Model::unitInfo(int unit) const {
  const BoundUnit& b = units_.at(size_t(unit));
  UnitInfo info{b.device, b.inDeviceMemory, b.weightBytes, b.kernelsReady, b.streamed, {}};
  if (!b.peers.empty()) {
    info.shards.push_back(b.device);
    for (const BoundUnit& p : b.peers) {
      info.shards.push_back(p.device);
      info.weightBytes += p.weightBytes;
      info.kernelsReady = info.kernelsReady && p.kernelsReady;
    }
  }
  return info;
}

std::string Model::unitName(int unit) const { return runtime::unitName(unit, int(config_.layers)); }

std::vector<const KvPagePool*> Model::kvPools() const {
  std::vector<const KvPagePool*> out;
  for (const auto& [key, pool] : pools_) out.push_back(pool.get());
  return out;
}

void Model::bind(const ModelLoadOptions& options) {
  JITLLM_REQUIRE(!options.devices.empty(), "a model needs at least one device");
  const int layers = int(config_.layers);
  const int units = layers + 2;
  std::vector<int> placement = options.placement;
  if (placement.empty() && options.placer) {
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
    const size_t kvPerToken = 2 * size_t(kvLayout_.kvHeads) * size_t(kvLayout_.headDim) * kvLayout_.elementBytes();
    placement = options.placer(weightBytes, kvPerToken, config_.contextLength, workspaceBytesEstimate());
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
  units_.reserve(size_t(units));
  for (int u = 0; u < units; u++) {
    const int d = placement[size_t(u)];
    JITLLM_REQUIRE(d >= 0 && d < int(options.devices.size()), "placement of ", unitName(u), " names device #", d,
                   ", not one of the ", options.devices.size(), " given");
    const bool streamed = u < int(options.streamed.size()) && options.streamed[size_t(u)];
    JITLLM_REQUIRE(!streamed || (u > 0 && u < units - 1), "only blocks can be streamed, not ", unitName(u));
    if (tp > 1 && u > 0 && u < units - 1) {
      units_.push_back(bindSplit(u, std::vector<Device*>(options.devices.begin(), options.devices.begin() + tp),
                                 options.partialSums));
      continue;
    }
    units_.push_back(bindUnit(u, *options.devices[size_t(d)], streamed));
    if (u > 0 && u < units - 1) kvPool(*units_.back().device);
  }
}

BoundUnit Model::bindUnit(int u, Device& device, bool streamed) {
  BoundUnit b;
  b.device = &device;
  const int units = int(config_.layers) + 2;
  const int64_t qRows = config_.heads * config_.headDim, kvRows = config_.kvHeads * config_.headDim;
  if (streamed) {
    const BlockTensors& t = tensors_.blocks[size_t(u - 1)];
    WeightRef qkv, gateUp;  // phi3's fused matrices, split below
    b.bindStreamed({{t.attnNorm, nullptr, &b.attnNorm},
                    {t.wqkv, &qkv, nullptr},
                    {t.gateUp, &gateUp, nullptr},
                    {t.ffnNorm, nullptr, &b.ffnNorm},
                    {t.wq, &b.wq, nullptr},
                    {t.wk, &b.wk, nullptr},
                    {t.wv, &b.wv, nullptr},
                    {t.wo, &b.wo, nullptr},
                    {t.gate, &b.gate, nullptr},
                    {t.up, &b.up, nullptr},
                    {t.down, &b.down, nullptr},
                    {t.bq, nullptr, &b.bq},
                    {t.bk, nullptr, &b.bk},
                    {t.bv, nullptr, &b.bv},
                    {t.qNorm, nullptr, &b.qNorm},
                    {t.kNorm, nullptr, &b.kNorm},
                    {t.attnPostNorm, nullptr, &b.attnPostNorm},
                    {t.ffnPostNorm, nullptr, &b.ffnPostNorm}});
    b.splitFused(qkv, qRows, kvRows, gateUp, config_.feedForward);
    return b;
  }
  if (u == 0) {
    b.table = b.bindMatrix(tensors_.tokenEmbedding);
  } else if (u == units - 1) {
    b.norm = b.bindVector(tensors_.outputNorm);
    b.table = b.bindMatrix(tensors_.output);
  } else {
    const BlockTensors& t = tensors_.blocks[size_t(u - 1)];
    b.attnNorm = b.bindVector(t.attnNorm);
    b.ffnNorm = b.bindVector(t.ffnNorm);
    if (t.wqkv) {
      b.splitFused(b.bindMatrix(t.wqkv), qRows, kvRows, {}, 0);
    } else {
      b.wq = b.bindMatrix(t.wq);
      b.wk = b.bindMatrix(t.wk);
      b.wv = b.bindMatrix(t.wv);
    }
    b.wo = b.bindMatrix(t.wo);
    if (t.gateUp) {
      b.splitFused({}, 0, 0, b.bindMatrix(t.gateUp), config_.feedForward);
    } else {
      b.gate = b.bindMatrix(t.gate);
      b.up = b.bindMatrix(t.up);
    }
    b.down = b.bindMatrix(t.down);
    b.bq = b.bindVector(t.bq);
    b.bk = b.bindVector(t.bk);
    b.bv = b.bindVector(t.bv);
    b.qNorm = b.bindVector(t.qNorm);
    b.kNorm = b.bindVector(t.kNorm);
    b.attnPostNorm = b.bindVector(t.attnPostNorm);
    b.ffnPostNorm = b.bindVector(t.ffnPostNorm);
  }
  return b;
}

BoundUnit Model::bindSplit(int u, const std::vector<Device*>& devices, bool partialSums) {
  const ModelConfig& c = config_;
  const int k = int(devices.size());
  JITLLM_REQUIRE(u > 0 && u <= c.layers, "only blocks split over devices, not ", unitName(u));
  JITLLM_REQUIRE(k >= 1 && k <= Session::kMaxShards, "a block splits over 1 to ", Session::kMaxShards, " devices, not ",
                 k);
  for (int i = 0; i < k; i++) {
    for (int j = 0; j < i; j++) {
      JITLLM_REQUIRE(devices[size_t(i)] != devices[size_t(j)], "tensor parallelism over ",
                     devices[size_t(i)]->info().id, " twice");
    }
  }
  JITLLM_REQUIRE(c.kvHeads % k == 0 && c.feedForward % k == 0, unitName(u), ": ", c.kvHeads, " KV heads and ",
                 c.feedForward, " FFN rows do not split over ", k, " devices");
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
  const bool woSplit = partialSums && columnsSplit(t.wo, heads * hd);
  const bool downSplit = partialSums && columnsSplit(t.down, ff);
  std::vector<BoundUnit> shards(static_cast<size_t>(k));
  for (int j = 0; j < k; j++) {
    BoundUnit& b = shards[size_t(j)];
    b.device = devices[size_t(j)];
    b.shard = j;
    b.shards = k;
    b.partialSums = partialSums;
    b.woSplit = woSplit;
    b.downSplit = downSplit;
    b.attnNorm = b.bindVector(t.attnNorm);
    b.ffnNorm = b.bindVector(t.ffnNorm);
    const int64_t q0 = j * heads * hd, kv0 = j * kvHeads * hd, f0 = j * ff;
    if (t.wqkv) {
      b.wq = b.bindRows(t.wqkv, q0, heads * hd);
      b.wk = b.bindRows(t.wqkv, qRows + kv0, kvHeads * hd);
      b.wv = b.bindRows(t.wqkv, qRows + kvRows + kv0, kvHeads * hd);
    } else {
      b.wq = b.bindRows(t.wq, q0, heads * hd);
      b.wk = b.bindRows(t.wk, kv0, kvHeads * hd);
      b.wv = b.bindRows(t.wv, kv0, kvHeads * hd);
    }
    if (t.gateUp) {
      b.gate = b.bindRows(t.gateUp, f0, ff);
      b.up = b.bindRows(t.gateUp, c.feedForward + f0, ff);
    } else {
      b.gate = b.bindRows(t.gate, f0, ff);
      b.up = b.bindRows(t.up, f0, ff);
    }
    if (woSplit) {
      b.wo = b.bindColumns(t.wo, q0, heads * hd);
    } else if (j == 0) {
      b.wo = b.bindMatrix(t.wo);
    }
    if (downSplit) {
      b.down = b.bindColumns(t.down, f0, ff);
    } else if (j == 0) {
      b.down = b.bindMatrix(t.down);
    }
    b.bq = b.bindVectorPart(t.bq, q0, heads * hd);
    b.bk = b.bindVectorPart(t.bk, kv0, kvHeads * hd);
    b.bv = b.bindVectorPart(t.bv, kv0, kvHeads * hd);
    b.qNorm = b.bindVector(t.qNorm);
    b.kNorm = b.bindVector(t.kNorm);
    if (j == 0) {  // applied to the whole branch output, on the first device
      b.attnPostNorm = b.bindVector(t.attnPostNorm);
      b.ffnPostNorm = b.bindVector(t.ffnPostNorm);
    }
    kvPool(*b.device, k);
  }
  BoundUnit first = std::move(shards[0]);
  for (int j = 1; j < k; j++) first.peers.push_back(std::move(shards[size_t(j)]));
  return first;
}

void Model::attachShardTables(Session& session, int unit) const {
  const BoundUnit& b = units_[size_t(unit)];
  const int layer = unit - 1;
  for (int j = 1; j < Session::kMaxShards; j++) {
    KvPagePool* pool = nullptr;
    if (j < b.shards) {
      pool = pools_.at({b.peers[size_t(j - 1)].device, b.shards}).get();
    }
    std::vector<PageId> none;
    std::vector<uint8_t*> noAddresses;
    KvPagePool* old = nullptr;
    session.replaceLayer(session.tableOf(layer, j), pool, none, noAddresses, 0, old);
  }
}

KernelWorkload Model::kernelWorkload(int u, const BoundUnit& b) const {
  KernelWorkload w;
  w.maxTokens = kMaxStepTokens;
  w.elementwise = true;
  if (u == 0) {
    w.tables.push_back(b.table);
  } else if (u == unitCount() - 1) {
    w.normDims.push_back(config_.embedding);
    w.products.push_back({b.table});
    // The rows that asked for logits, gathered out of a mixed step (Model::step): f32 rows.
    const int64_t E = config_.embedding;
    w.tables.push_back(WeightRef{quant::TensorType::kF32, nullptr, kMaxStepTokens, E, size_t(E) * sizeof(float)});
    w.candidates = true;
  } else {
    w.products = {{b.wq, b.wk, b.wv}, {b.gate, b.up}};
    if (b.wo.rows > 0) w.products.push_back({b.wo});
    if (b.down.rows > 0) w.products.push_back({b.down});
    // A split block's first device interleaves the shards' outputs of what it runs whole
    // (runSplitBlock): f32 rows of one shard's width.
    auto stacked = [&](int64_t width) {
      w.tables.push_back(
          WeightRef{quant::TensorType::kF32, nullptr, kMaxStepTokens * b.shards, width, size_t(width) * sizeof(float)});
    };
    if (b.shards > 1 && b.shard == 0 && !b.woSplit) stacked(config_.heads / b.shards * config_.headDim);
    if (b.shards > 1 && b.shard == 0 && !b.downSplit) stacked(config_.feedForward / b.shards);
    w.attention.push_back(
        {int(config_.heads) / b.shards, shardLayout(kvLayout_, b.shards), int(config_.rotaryDims), config_.ropeNeox});
    w.normDims.push_back(config_.embedding);
    if (b.qNorm) w.normDims.push_back(config_.headDim);
  }
  return w;
}

size_t Model::prepareKernels(const std::function<void(size_t done, size_t total)>& progress) {
  // One workload per device, the union of its units': layers share shapes, so each device
  // compiles every variant once, all in one parallel batch.
  std::vector<Device*> devices;
  std::vector<KernelWorkload> workloads;
  auto add = [&](int u, const BoundUnit& b) {
    const KernelWorkload w = kernelWorkload(u, b);
    auto it = std::find(devices.begin(), devices.end(), b.device);
    if (it == devices.end()) {
      devices.push_back(b.device);
      workloads.push_back(w);
      return;
    }
    KernelWorkload& all = workloads[size_t(it - devices.begin())];
    all.products.insert(all.products.end(), w.products.begin(), w.products.end());
    all.tables.insert(all.tables.end(), w.tables.begin(), w.tables.end());
    all.attention.insert(all.attention.end(), w.attention.begin(), w.attention.end());
    all.normDims.insert(all.normDims.end(), w.normDims.begin(), w.normDims.end());
    all.candidates = all.candidates || w.candidates;
  };
  for (int u = 0; u < unitCount(); u++) {
    const BoundUnit& b = units_[size_t(u)];
    if (b.streamed) continue;  // its weights move between slots; the first step makes its kernels
    add(u, b);
    for (const BoundUnit& p : b.peers) add(u, p);
  }
  const DeviceLocks locks(devices);
  size_t made = 0;
  for (size_t i = 0; i < devices.size(); i++) {
    made += devices[i]->prepareKernels(workloads[i]);
    if (progress) progress(i + 1, devices.size());
  }
  for (int u = 0; u < unitCount(); u++) warmUp(u, units_[size_t(u)], true);
  return made;
}

void Model::warmUp(int u, BoundUnit& b, bool prepared) {
  if (b.streamed) return;  // its weights are not on the device between steps; the first step compiles
  if (!b.peers.empty()) {
    // One token at position 0 through the split block, each shard's KV written to a scratch page.
    std::vector<BoundUnit*> shards{&b};
    for (BoundUnit& p : b.peers) shards.push_back(&p);
    std::vector<std::vector<KvSlot>> slots;
    std::vector<std::vector<const uint8_t* const*>> tables;
    std::vector<const uint8_t*> addresses(shards.size());
    std::vector<std::pair<KvPagePool*, PageId>> pages;
    struct FreePages {
      std::vector<std::pair<KvPagePool*, PageId>>& pages;
      ~FreePages() {
        for (auto [pool, page] : pages) pool->free(page);
      }
    } release{pages};
    for (size_t j = 0; j < shards.size(); j++) {
      Device& d = *shards[j]->device;
      if (!prepared) d.prepareKernels(kernelWorkload(u, *shards[j]));
      workspace(d, 1);
      KvPagePool& pool = kvPool(d, b.shards);
      pages.push_back({&pool, pool.allocate()});
      addresses[j] = pool.address(pages.back().second);
    }
    for (size_t j = 0; j < shards.size(); j++) {
      slots.push_back({KvSlot{const_cast<uint8_t*>(addresses[j]), 0}});
      tables.push_back({&addresses[j]});
    }
    Workspace& ws = workspace(*b.device, 1);
    const std::vector<float> zeros(static_cast<size_t>(config_.embedding), 0.0f);
    b.device->copyFromHost(ws.x->data(), zeros.data(), zeros.size() * sizeof(float));
    const int32_t position = 0;
    runSplitBlock(b, u - 1, 1, &position, slots, tables);
    std::vector<float> sink(1);
    b.device->copyToHost(sink.data(), ws.x->data(), sizeof(float));
    for (BoundUnit* s : shards) s->kernelsReady = true;
    return;
  }
  Device& d = *b.device;
  if (!prepared) d.prepareKernels(kernelWorkload(u, b));
  Workspace& ws = workspace(d, 1);
  if (d.info().caps.kernelsCompiledIn) {
    if (u > 0 && u < unitCount() - 1) kvPool(d);  // what a step there needs, minus running it
    b.kernelsReady = true;                        // compiled in
    return;
  }
  const int64_t E = config_.embedding;
  const std::vector<float> zeros(static_cast<size_t>(E), 0.0f);
  if (u == 0) {
    const int32_t id = 0;
    d.getRows(b.table, &id, 1, ws.f(ws.x));
  } else if (u == unitCount() - 1) {
    d.copyFromHost(ws.x->data(), zeros.data(), zeros.size() * sizeof(float));
    d.rmsNorm(ws.f(ws.x), b.norm, ws.f(ws.normed), 1, E, config_.rmsEps);
    if (ws.logitsCapacity < 1) {
      ws.logits = d.allocate(size_t(config_.vocabSize) * sizeof(float));
      ws.logitsCapacity = 1;
    }
    d.matmul(b.table, ws.f(ws.normed), 1, ws.f(ws.logits), nullptr);
  } else {
    // One token at position 0 through the block, its KV written to a scratch page.
    KvPagePool& pool = kvPool(d);
    const PageId page = pool.allocate();
    struct FreePage {
      KvPagePool& pool;
      PageId page;
      ~FreePage() { pool.free(page); }
    } release{pool, page};
    uint8_t* address = pool.address(page);
    const uint8_t* table[1] = {address};
    const uint8_t* const* tables[1] = {table};
    const KvSlot slot{address, 0};
    const int32_t position = 0;
    d.copyFromHost(ws.x->data(), zeros.data(), zeros.size() * sizeof(float));
    runBlock(b, u - 1, ws, 1, &position, &slot, tables);
  }
  std::vector<float> sink(1);
  d.copyToHost(sink.data(), ws.x->data(), sizeof(float));  // waits for the queued ops (GPU)
  b.kernelsReady = true;
}

void Model::streamIn(int unit, Workspace& ws) {
  Device& d = *ws.device;
  // Slots as large as the largest block streamed here.
  size_t largest = 0;
  for (const BoundUnit& b : units_) {
    if (b.streamed && b.device == &d) largest = std::max(largest, b.streamBytes);
  }
  if (ws.slotBytes < largest) {
    ws.inFlight.clear();
    for (auto& s : ws.slots) {
      s.reset();
      s = d.allocate(largest);
    }
    ws.slotBytes = largest;
    ws.slotFree[0] = ws.slotFree[1] = 0;
  }
  auto issue = [&](int u) {
    const int slot = ws.nextSlot;
    ws.nextSlot ^= 1;
    BoundUnit& b = units_[size_t(u)];
    const uint64_t ticket =
        d.uploadAsync(ws.slots[slot]->data(), b.streamSource->data(), b.streamBytes, ws.slotFree[slot]);
    ws.inFlight[u] = {slot, ticket};
  };
  if (!ws.inFlight.count(unit)) issue(unit);
  // The next block, if it streams through this device too, starts uploading now and so overlaps
  // this block's ops.
  const int next = unit + 1;
  if (next < unitCount() - 1 && units_[size_t(next)].streamed && units_[size_t(next)].device == &d &&
      !ws.inFlight.count(next)) {
    issue(next);
  }
  const auto [slot, ticket] = ws.inFlight.at(unit);
  d.waitForUpload(ticket);
  units_[size_t(unit)].rebase(ws.slots[slot]->data());
}

void Model::releaseIdleWorkspaces() {
  std::erase_if(workspaces_, [&](const auto& entry) {
    for (const BoundUnit& u : units_) {
      if (u.device == entry.first) return false;
      for (const BoundUnit& p : u.peers) {
        if (p.device == entry.first) return false;
      }
    }
    return true;
  });
}

size_t Model::workspaceBytesEstimate() const {
  const ModelConfig& c = config_;
  const int64_t widths = 2 * std::max(c.embedding, c.heads * c.headDim) + 2 * c.heads * c.headDim +
                         2 * c.kvHeads * c.headDim + 2 * std::max(c.feedForward, c.embedding);
  return size_t(kMaxStepTokens * widths + 64 * c.vocabSize) * sizeof(float);
}

void Model::rebindUnit(int unit, Device& device) {
  JITLLM_REQUIRE(unit >= 0 && unit < unitCount(), "no unit ", unit, " in a model of ", unitCount());
  if (unit > 0 && unit < unitCount() - 1) {
    for (const Session* s : sessions_.all()) {
      // The page table, not just its live pages: a tiny sliding window can leave a table of freed
      // entries only, which the rebind below cannot take over either.
      for (int j = 0; j < Session::kMaxShards; j++) {
        JITLLM_REQUIRE(s->layerPageTableSize(s->tableOf(unit - 1, j)) == 0, "session ", s->id(), " still holds KV of ",
                       unitName(unit), "; it must end before the unit is re-placed");
      }
    }
  }
  BoundUnit fresh = bindUnit(unit, device);
  warmUp(unit, fresh);
  units_[size_t(unit)] = std::move(fresh);
  if (unit > 0 && unit < unitCount() - 1) {
    for (Session* s : sessions_.all()) attachShardTables(*s, unit);
  }
  if (unit > 0 && unit < unitCount() - 1) {
    kvPool(device);
    // Sessions that hold no KV of the layer yet (checked above) take their pages from the new pool.
    for (Session* s : sessions_.all()) {
      std::vector<PageId> none;
      std::vector<uint8_t*> noAddresses;
      s->rebindLayer(unit - 1, kvPool(device), none, noAddresses);
    }
  }
}

void Model::releaseDevice(Device& device) {
  for (int u = 0; u < unitCount(); u++) {
    JITLLM_REQUIRE(units_[size_t(u)].device != &device, unitName(u), " still runs on ", device.info().id);
    for (const BoundUnit& p : units_[size_t(u)].peers) {
      JITLLM_REQUIRE(p.device != &device, unitName(u), " still runs partly on ", device.info().id);
    }
  }
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (it->first.first != &device) {
      ++it;
      continue;
    }
    JITLLM_REQUIRE(it->second->pagesInUse() == 0, it->second->pagesInUse(), " KV pages are still in use on ",
                   device.info().id);
    it = pools_.erase(it);
  }
  workspaces_.erase(&device);
}

KvPagePool& Model::kvPool(Device& device) { return kvPool(device, 1); }

KvPagePool& Model::kvPool(Device& device, int shards) {
  auto& pool = pools_[{&device, shards}];
  if (!pool) pool = std::make_unique<KvPagePool>(device, shardLayout(kvLayout_, shards));
  return *pool;
}

std::unique_ptr<Session> Model::createSession(int64_t contextLimit) {
  if (contextLimit == 0) contextLimit = config_.contextLength;
  JITLLM_REQUIRE(contextLimit > 0, "context limit must be positive, not ", contextLimit);
  std::vector<KvPagePool*> layerPools;
  std::vector<int64_t> windows;
  for (int l = 0; l < config_.layers; l++) {
    const BoundUnit& b = units_[size_t(l + 1)];
    layerPools.push_back(&kvPool(*b.device, b.shards));
    windows.push_back(config_.slidingLayer(l) ? config_.slidingWindow : 0);
  }
  auto session =
      std::make_unique<Session>(nextSessionId_++, contextLimit, std::move(layerPools), &sessions_, std::move(windows));
  for (int l = 0; l < config_.layers; l++) {
    if (units_[size_t(l + 1)].shards > 1) attachShardTables(*session, l + 1);
  }
  return session;
}

Model::Workspace& Model::workspace(Device& device, int64_t tokens) {
  auto& ws = workspaces_[&device];
  if (!ws) {
    ws = std::make_unique<Workspace>();
    ws->device = &device;
  }
  if (ws->capacity < tokens) {
    const ModelConfig& c = config_;
    const size_t t = size_t(tokens);
    auto alloc = [&](int64_t width) { return device.allocate(t * size_t(width) * sizeof(float)); };
    Workspace fresh;
    fresh.device = &device;
    fresh.x = alloc(c.embedding);
    fresh.normed = alloc(std::max(c.embedding, c.heads * c.headDim));
    fresh.q = alloc(c.heads * c.headDim);
    fresh.k = alloc(c.kvHeads * c.headDim);
    fresh.v = alloc(c.kvHeads * c.headDim);
    fresh.attn = alloc(c.heads * c.headDim);
    // Also the post norms' outputs (runBlock), so at least embedding wide.
    fresh.gate = alloc(std::max(c.feedForward, c.embedding));
    fresh.up = alloc(std::max(c.feedForward, c.embedding));
    fresh.capacity = tokens;
    fresh.logits = std::move(ws->logits);
    fresh.logitsCapacity = ws->logitsCapacity;
    *ws = std::move(fresh);
  }
  return *ws;
}

void Model::attentionHeads(const BoundUnit& u, int layer, Workspace& ws, int64_t T, const int32_t* positions,
                           const KvSlot* slots, const uint8_t* const* const* pageTables, int heads,
                           const KvLayout& kv) {
  const ModelConfig& c = config_;
  Device& d = *u.device;
  float* x = ws.f(ws.x);
  float* normed = ws.f(ws.normed);
  float* q = ws.f(ws.q);
  float* k = ws.f(ws.k);
  float* v = ws.f(ws.v);
  float* attn = ws.f(ws.attn);

  d.rmsNorm(x, u.attnNorm, normed, T, c.embedding, c.rmsEps);
  const MatmulTarget qkv[] = {{u.wq, q, u.bq}, {u.wk, k, u.bk}, {u.wv, v, u.bv}};
  d.matmuls(qkv, normed, T);
  if (u.qNorm) {
    // Each head of q and k normalised on its own (qwen3), out of place: q into `normed` (free
    // once the products above have read it), k into `attn` (free until attention writes it,
    // after k is in the cache).
    d.rmsNorm(q, u.qNorm, normed, T * heads, c.headDim, c.rmsEps);
    d.rmsNorm(k, u.kNorm, attn, T * kv.kvHeads, c.headDim, c.rmsEps);
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

void Model::ffnHidden(const BoundUnit& u, Workspace& ws, int64_t T, int64_t rows) {
  const ModelConfig& c = config_;
  Device& d = *u.device;
  float* gate = ws.f(ws.gate);
  float* up = ws.f(ws.up);
  d.rmsNorm(ws.f(ws.x), u.ffnNorm, ws.f(ws.normed), T, c.embedding, c.rmsEps);
  const MatmulTarget gateUp[] = {{u.gate, gate, nullptr}, {u.up, up, nullptr}};
  d.matmuls(gateUp, ws.f(ws.normed), T);
  if (c.geluFfn) {
    d.geglu(gate, up, gate, T * rows);
  } else {
    d.swiglu(gate, up, gate, T * rows);
  }
}

void Model::joinResidual(Device& d, Workspace& ws, float* branch, const float* postNorm, float* spare, int64_t T) {
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

void Model::runBlock(const BoundUnit& u, int layer, Workspace& ws, int64_t T, const int32_t* positions,
                     const KvSlot* slots, const uint8_t* const* const* pageTables) {
  const ModelConfig& c = config_;
  Device& d = *u.device;
  attentionHeads(u, layer, ws, T, positions, slots, pageTables, int(c.heads), kvLayout_);
  d.matmul(u.wo, ws.f(ws.attn), T, ws.f(ws.normed), nullptr);
  joinResidual(d, ws, ws.f(ws.normed), u.attnPostNorm, ws.f(ws.gate), T);
  ffnHidden(u, ws, T, c.feedForward);
  d.matmul(u.down, ws.f(ws.gate), T, ws.f(ws.normed), nullptr);
  joinResidual(d, ws, ws.f(ws.normed), u.ffnPostNorm, ws.f(ws.up), T);
}

void Model::runSplitBlock(const BoundUnit& u, int layer, int64_t T, const int32_t* positions,
                          const std::vector<std::vector<KvSlot>>& slots,
                          const std::vector<std::vector<const uint8_t* const*>>& pageTables) {
  const ModelConfig& c = config_;
  const int k = u.shards;
  std::vector<const BoundUnit*> shard{&u};
  for (const BoundUnit& p : u.peers) shard.push_back(&p);
  std::vector<Workspace*> ws;
  for (const BoundUnit* b : shard) ws.push_back(&workspace(*b->device, T));
  Device& first = *u.device;
  Workspace& w0 = *ws[0];
  const size_t rowBytes = size_t(T * c.embedding) * sizeof(float);
  if (w0.partialCapacity < T) {
    w0.partial.reset();
    w0.partial = first.allocate(rowBytes);
    w0.partialCapacity = T;
  }
  // The hidden state lives on the first device; the others get a copy before each branch.
  auto broadcast = [&] {
    for (int j = 1; j < k; j++)
      first.copyToDevice(*shard[size_t(j)]->device, ws[size_t(j)]->x->data(), w0.x->data(), rowBytes);
  };
  // The shards' partial sums of a split product, added on the first device in shard order.
  auto reduce = [&](std::unique_ptr<DeviceBuffer> Workspace::*buffer) {
    for (int j = 1; j < k; j++) {
      shard[size_t(j)]->device->copyToDevice(first, w0.partial->data(), (ws[size_t(j)]->*buffer)->data(), rowBytes);
      first.add(w0.f(w0.*buffer), w0.f(w0.partial), T * c.embedding);
    }
  };
  // The shards' outputs (`width` columns each) side by side in the first device's `buffer`, for a
  // product that runs there whole: stacked on the first device (one copy a shard, a peer copy
  // between GPUs), then interleaved row by row by one getRows over them as a table of f32 rows.
  std::vector<int32_t> order(size_t(T * k));
  for (int64_t t = 0; t < T; t++) {
    for (int j = 0; j < k; j++) order[size_t(t * k + j)] = int32_t(j * T + t);
  }
  auto gather = [&](std::unique_ptr<DeviceBuffer> Workspace::*buffer, int64_t width) {
    const size_t part = size_t(T * width) * sizeof(float);
    if (w0.stackedBytes < part * size_t(k)) {
      w0.stacked.reset();
      w0.stacked = first.allocate(part * size_t(k));
      w0.stackedBytes = part * size_t(k);
    }
    for (int j = 0; j < k; j++) {
      shard[size_t(j)]->device->copyToDevice(first, w0.stacked->data() + size_t(j) * part,
                                             (ws[size_t(j)]->*buffer)->data(), part);
    }
    const WeightRef stacked{quant::TensorType::kF32, w0.stacked->data(), T * k, width, size_t(width) * sizeof(float)};
    first.getRows(stacked, order.data(), T * k, w0.f(w0.*buffer));
  };

  const int heads = int(c.heads) / k;
  const KvLayout kv = shardLayout(kvLayout_, k);
  broadcast();
  for (int j = 0; j < k; j++) {
    attentionHeads(*shard[size_t(j)], layer, *ws[size_t(j)], T, positions, slots[size_t(j)].data(),
                   pageTables[size_t(j)].data(), heads, kv);
  }
  if (u.woSplit) {
    for (int j = 0; j < k; j++) {
      shard[size_t(j)]->device->matmul(shard[size_t(j)]->wo, ws[size_t(j)]->f(ws[size_t(j)]->attn), T,
                                       ws[size_t(j)]->f(ws[size_t(j)]->normed), nullptr);
    }
    reduce(&Workspace::normed);
  } else {
    gather(&Workspace::attn, heads * c.headDim);
    first.matmul(u.wo, w0.f(w0.attn), T, w0.f(w0.normed), nullptr);
  }
  joinResidual(first, w0, w0.f(w0.normed), u.attnPostNorm, w0.f(w0.gate), T);

  const int64_t ff = c.feedForward / k;
  broadcast();
  for (int j = 0; j < k; j++) ffnHidden(*shard[size_t(j)], *ws[size_t(j)], T, ff);
  if (u.downSplit) {
    for (int j = 0; j < k; j++) {
      shard[size_t(j)]->device->matmul(shard[size_t(j)]->down, ws[size_t(j)]->f(ws[size_t(j)]->gate), T,
                                       ws[size_t(j)]->f(ws[size_t(j)]->normed), nullptr);
    }
    reduce(&Workspace::normed);
  } else {
    gather(&Workspace::gate, ff);
    first.matmul(u.down, w0.f(w0.gate), T, w0.f(w0.normed), nullptr);
  }
  joinResidual(first, w0, w0.f(w0.normed), u.ffnPostNorm, w0.f(w0.up), T);
}

void Model::forward(std::span<const SequenceInput> inputs, std::vector<float>& logits) {
  const int64_t V = config_.vocabSize;
  step(inputs, [&](Device& d, float* rows, int64_t, int64_t n) {
    const size_t before = logits.size();
    logits.resize(before + size_t(n * V));
    d.copyToHost(logits.data() + before, reinterpret_cast<const uint8_t*>(rows), size_t(n * V) * sizeof(float));
  });
}

void Model::forward(std::span<const SequenceInput> inputs, std::span<const CandidateRequest> requests, int64_t stride,
                    std::vector<int32_t>& ids, std::vector<float>& values) {
  int64_t positions = 0;
  for (const SequenceInput& in : inputs) positions += in.allLogits ? int64_t(in.tokens.size()) : 1;
  JITLLM_REQUIRE(int64_t(requests.size()) == positions, "forward: ", requests.size(), " candidate requests for ",
                 positions, " positions");
  ids.resize(size_t(positions * stride));
  values.resize(size_t(positions * stride));
  step(inputs, [&](Device& d, float* rows, int64_t first, int64_t n) {
    d.selectCandidates(rows, n, config_.vocabSize, requests.subspan(size_t(first), size_t(n)),
                       ids.data() + first * stride, values.data() + first * stride, stride);
  });
}

namespace {
// Hands a microbatch's prompt rows to each device that runs one of its blocks, and takes them back
// from all of them before the head - or when the step fails - so no later product reads them.
class PromptRowsScope {
 public:
  PromptRowsScope(std::span<const Device::RowRange> rows, int64_t tokens) : rows_(rows), tokens_(tokens) {}
  PromptRowsScope(const PromptRowsScope&) = delete;
  PromptRowsScope& operator=(const PromptRowsScope&) = delete;
  ~PromptRowsScope() { clear(); }
  void on(Device& d) {
    if (rows_.empty() || std::find(told_.begin(), told_.end(), &d) != told_.end()) return;
    d.setPromptRows(rows_, tokens_);
    told_.push_back(&d);
  }
  void clear() noexcept {
    for (Device* d : told_) d->setPromptRows({}, 0);
    told_.clear();
  }

 private:
  std::span<const Device::RowRange> rows_;
  int64_t tokens_;
  std::vector<Device*> told_;
};
}  // namespace

void Model::step(std::span<const SequenceInput> inputs, const HeadOutput& headOutput) {
  const ModelConfig& c = config_;
  // Validate the whole batch before touching any session.
  std::set<Session*> seen;
  int64_t total = 0;
  for (const SequenceInput& in : inputs) {
    JITLLM_REQUIRE(in.session != nullptr, "forward: input without a session");
    JITLLM_REQUIRE(seen.insert(in.session).second, "forward: session ", in.session->id(),
                   " appears twice in one batch");
    JITLLM_REQUIRE(!in.tokens.empty(), "forward: session ", in.session->id(), " was given no tokens");
    JITLLM_REQUIRE(in.promptTokens >= 0 && in.promptTokens <= int64_t(in.tokens.size()), "forward: session ",
                   in.session->id(), ": ", in.promptTokens, " prompt tokens of ", in.tokens.size());
    for (int32_t id : in.tokens) {
      JITLLM_REQUIRE(id >= 0 && id < c.vocabSize, "token id ", id, " is outside the vocabulary (", c.vocabSize,
                     " tokens)");
    }
    const int64_t after = in.session->length() + int64_t(in.tokens.size());
    JITLLM_REQUIRE(after <= in.session->contextLimit(), "context limit exceeded: session ", in.session->id(), " holds ",
                   in.session->length(), " tokens, ", in.tokens.size(), " more would pass its limit of ",
                   in.session->contextLimit());
    total += int64_t(in.tokens.size());
  }
  for (const SequenceInput& in : inputs) in.session->reserve(int64_t(in.tokens.size()));

  // Flatten (input, token) pairs; microbatches take consecutive runs of them.
  struct TokenRef {
    Session* session;
    int32_t id;
    int32_t position;
    bool wantLogits;
    bool prompt;
  };
  std::vector<TokenRef> flat;
  flat.reserve(size_t(total));
  for (const SequenceInput& in : inputs) {
    const int64_t base = in.session->length();
    for (size_t j = 0; j < in.tokens.size(); j++) {
      flat.push_back({in.session, in.tokens[j], int32_t(base + int64_t(j)), in.allLogits || j + 1 == in.tokens.size(),
                      int64_t(j) < in.promptTokens});
    }
  }

  const int64_t E = c.embedding;
  std::vector<float> hostRows;
  int64_t returned = 0;  // positions whose output went to headOutput so far
  for (int64_t t0 = 0; t0 < total; t0 += kMaxStepTokens) {
    const int64_t T = std::min(kMaxStepTokens, total - t0);
    std::vector<int32_t> ids(static_cast<size_t>(T)), positions(static_cast<size_t>(T));
    std::vector<Session*> sessions(static_cast<size_t>(T));
    std::vector<KvSlot> slots(static_cast<size_t>(T));
    std::vector<const uint8_t* const*> pageTables(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; t++) {
      const TokenRef& r = flat[size_t(t0 + t)];
      ids[size_t(t)] = r.id;
      positions[size_t(t)] = r.position;
      sessions[size_t(t)] = r.session;
    }

    // The prompt rows of this microbatch, for the blocks' products (not the head's, whose rows are
    // the ones that asked for logits).
    std::vector<Device::RowRange> promptRows;
    for (int64_t t = 0; t < T; t++) {
      if (!flat[size_t(t0 + t)].prompt) continue;
      if (!promptRows.empty() && promptRows.back().end == t)
        promptRows.back().end = t + 1;
      else
        promptRows.push_back({t, t + 1});
    }
    PromptRowsScope promptScope(promptRows, T);

    Workspace* ws = &workspace(*units_[0].device, T);
    // Each device's share of the step, waits for it included (Device::addBusyTime).
    auto busySince = std::chrono::steady_clock::now();
    auto busyUntilNow = [&busySince](Device& device) {
      const auto now = std::chrono::steady_clock::now();
      device.addBusyTime(now - busySince);
      busySince = now;
    };
    ws->device->getRows(units_[0].table, ids.data(), T, ws->f(ws->x));
    if (config_.embeddingScale != 0) ws->device->scale(ws->f(ws->x), config_.embeddingScale, T * config_.embedding);
    units_[0].kernelsReady = true;
    for (int unit = 1; unit < unitCount(); unit++) {
      Device& d = *units_[size_t(unit)].device;
      if (&d != ws->device) {
        // A device boundary: the hidden state crosses once, through host memory.
        Workspace& next = workspace(d, T);
        hostRows.resize(size_t(T * E));
        ws->device->copyToHost(hostRows.data(), ws->x->data(), hostRows.size() * sizeof(float));
        busyUntilNow(*ws->device);
        d.copyFromHost(next.x->data(), hostRows.data(), hostRows.size() * sizeof(float));
        ws = &next;
      }
      if (unit < unitCount() - 1 && units_[size_t(unit)].shards > 1) {
        BoundUnit& b = units_[size_t(unit)];
        const int layer = unit - 1;
        std::vector<std::vector<KvSlot>> shardSlots(size_t(b.shards), std::vector<KvSlot>(size_t(T)));
        std::vector<std::vector<const uint8_t* const*>> shardTables(size_t(b.shards),
                                                                    std::vector<const uint8_t* const*>(size_t(T)));
        for (int j = 0; j < b.shards; j++) {
          for (int64_t t = 0; t < T; t++) {
            const int table = sessions[size_t(t)]->tableOf(layer, j);
            shardSlots[size_t(j)][size_t(t)] = sessions[size_t(t)]->slotFor(table, positions[size_t(t)]);
            shardTables[size_t(j)][size_t(t)] = sessions[size_t(t)]->pageAddresses(table).data();
          }
        }
        // Every shard takes the prompt path for its rows, so a split block keeps one device's bits
        // for prompt tokens too (its products are per row; the whole ones see the same rows).
        promptScope.on(*b.device);
        for (BoundUnit& p : b.peers) promptScope.on(*p.device);
        runSplitBlock(b, layer, T, positions.data(), shardSlots, shardTables);
        b.kernelsReady = true;
        for (BoundUnit& p : b.peers) p.kernelsReady = true;
      } else if (unit < unitCount() - 1) {
        const int layer = unit - 1;
        for (int64_t t = 0; t < T; t++) {
          slots[size_t(t)] = sessions[size_t(t)]->slotFor(layer, positions[size_t(t)]);
          pageTables[size_t(t)] = sessions[size_t(t)]->pageAddresses(layer).data();
        }
        BoundUnit& b = units_[size_t(unit)];
        if (b.streamed) streamIn(unit, *ws);
        promptScope.on(d);
        runBlock(b, layer, *ws, T, positions.data(), slots.data(), pageTables.data());
        if (b.streamed) ws->slotFree[ws->inFlight.at(unit).first] = d.markOps();
        if (b.streamed) ws->inFlight.erase(unit);
        b.kernelsReady = true;
      }
    }

    promptScope.clear();

    // The head: only rows whose logits were asked for.
    BoundUnit& head = units_.back();
    Device& d = *head.device;
    std::vector<int32_t> rows;
    for (int64_t t = 0; t < T; t++) {
      if (flat[size_t(t0 + t)].wantLogits) rows.push_back(int32_t(t));
    }
    if (rows.empty()) {
      busyUntilNow(*ws->device);
      continue;
    }
    float* x = ws->f(ws->x);
    float* normed = ws->f(ws->normed);
    const int64_t n = int64_t(rows.size());
    const bool contiguous = rows.back() - rows.front() + 1 == n;
    const float* src = x + int64_t(rows.front()) * E;
    if (!contiguous) {
      // The rows that asked, gathered on the device (a prefill chunk's last token among decode
      // tokens): getRows over the hidden states as a table of float rows.
      d.getRows(
          WeightRef{quant::TensorType::kF32, reinterpret_cast<const uint8_t*>(x), T, E, size_t(E) * sizeof(float)},
          rows.data(), n, normed);
      src = normed;
    }
    d.rmsNorm(src, head.norm, normed, n, E, c.rmsEps);
    if (ws->logitsCapacity < n) {
      ws->logits.reset();
      ws->logits = d.allocate(size_t(n * c.vocabSize) * sizeof(float));
      ws->logitsCapacity = n;
    }
    float* out = ws->f(ws->logits);
    d.matmul(head.table, normed, n, out, nullptr);
    if (c.logitScale != 1) d.scale(out, 1.0f / c.logitScale, n * c.vocabSize);
    if (c.logitSoftcap != 0) d.softcap(out, c.logitSoftcap, n * c.vocabSize);
    units_.back().kernelsReady = true;
    headOutput(d, out, returned, n);
    returned += n;
    busyUntilNow(d);
  }
  for (const SequenceInput& in : inputs) in.session->advance(int64_t(in.tokens.size()));
}

}  // namespace jitllm::runtime
