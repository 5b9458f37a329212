#include "engine/runtime/model.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/kv/kv_pools.h"
#include "engine/runtime/block_graph.h"
#include "engine/runtime/bound_unit.h"
#include "engine/runtime/step_executor.h"
#include "engine/runtime/step_plan.h"
#include "engine/runtime/unit_binder.h"
#include "engine/runtime/unit_range.h"
#include "engine/runtime/unit_warm_up.h"
#include "engine/tokenizer/vocab_from_gguf.h"

namespace jitllm::runtime {
namespace {

// The rope frequency factors the file holds (llama3's rope_freqs, phi3's LongRoPE factors), each
// checked: a bad one is an error naming the tensor, not NaN logits.
std::vector<float> ropeFactors(const gguf::GgufFile& file, const ModelConfig& config, const ModelTensors& tensors) {
  std::vector<float> factors;
  if (!tensors.ropeFreqs) return factors;
  const auto* f = reinterpret_cast<const float*>(tensors.ropeFreqs->data);
  factors.assign(f, f + config.rotaryDims / 2);
  for (float v : factors) {
    JITLLM_REQUIRE(std::isfinite(v) && v > 0, file.name(), ": tensor '", tensors.ropeFreqs->name, "' holds ", v,
                   ", not a positive factor");
  }
  return factors;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const ModelLoadOptions& options) {
  return fromFile(gguf::GgufFile::open(path), options);
}

std::unique_ptr<Model> Model::fromFile(std::unique_ptr<gguf::GgufFile> file, const ModelLoadOptions& options) {
  return std::unique_ptr<Model>(new Model(std::move(file), options));
}

Model::Model(std::unique_ptr<gguf::GgufFile> file, const ModelLoadOptions& options)
    : file_(std::move(file)), config_(ModelConfig::fromGguf(*file_)) {
  JITLLM_REQUIRE(options.contextSize >= 0, "context size ", options.contextSize, " is negative");
  config_.servedContext =
      options.contextSize > 0 ? std::min(options.contextSize, config_.contextLength) : config_.contextLength;
  tensors_ = ModelTensors::find(*file_, config_);
  if (file_->find("tokenizer.ggml.model")) {
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::vocabFromGguf(*file_));
    JITLLM_REQUIRE(tokenizer_->vocabSize() == config_.vocabSize, file_->name(), ": the tokenizer has ",
                   tokenizer_->vocabSize(), " tokens but the embedding has ", config_.vocabSize, " rows");
  }
  std::vector<float> factors = ropeFactors(*file_, config_, tensors_);
  JITLLM_REQUIRE(options.kvPageTokens > 0 && options.kvPageTokens <= 4096, "KV page size ", options.kvPageTokens,
                 " tokens is out of range");
  kvLayout_ = KvLayout{options.kvPageTokens, int(config_.kvHeads), int(config_.headDim), options.kvPrecision};
  binder_ = std::make_unique<UnitBinder>(config_, tensors_);
  pools_ = std::make_unique<KvPools>(kvLayout_);
  workspaces_ = std::make_unique<Workspaces>(config_);
  graph_ = std::make_unique<BlockGraph>(config_, kvLayout_, std::move(factors), *workspaces_);
  warmUp_ = std::make_unique<UnitWarmUp>(config_, kvLayout_, *pools_, *workspaces_, *graph_);
  plan_ = std::make_unique<StepPlan>(kMaxStepTokens);
  executor_ = std::make_unique<StepExecutor>(config_, *graph_, *workspaces_);

  const size_t kvPerToken = 2 * size_t(kvLayout_.kvHeads) * size_t(kvLayout_.headDim) * kvLayout_.elementBytes();
  units_ = binder_->bindAll(options, kvPerToken, workspaceBytesEstimate());
  // Every block's devices have their pools from the start (kvPools() lists them).
  for (int u = 1; u + 1 < unitCount(); u++) {
    const BlockUnit& block = units_[size_t(u)].block();
    for (const BlockShard& s : block.shards) pools_->get(*s.binding.device, int(block.shards.size()));
  }
}

Model::~Model() = default;

const tokenizer::Tokenizer& Model::tokenizer() const {
  JITLLM_REQUIRE(tokenizer_ != nullptr, file_->name(), ": the file has no tokenizer (tokenizer.ggml.* keys)");
  return *tokenizer_;
}

int Model::unitCount() const { return int(units_.size()); }

std::vector<Device*> Model::devices() const {
  std::vector<Device*> out;
  for (const BoundUnit& u : units_) u.forEachBinding([&](const DeviceWeights& w) { out.push_back(w.device); });
  pools_->appendDevices(out);
  workspaces_->appendDevices(out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Device& Model::unitDevice(int unit) const { return units_.at(size_t(unit)).device(); }

UnitInfo Model::unitInfo(int unit) const {
  const BoundUnit& b = units_.at(size_t(unit));
  const DeviceWeights& first = b.primary();
  UnitInfo info{first.device, first.inDeviceMemory, 0, true, b.streamed(), {}};
  b.forEachBinding([&](const DeviceWeights& w) {
    info.weightBytes += w.weightBytes;
    info.kernelsReady = info.kernelsReady && w.kernelsReady;
  });
  if (b.isBlock() && b.block().split()) {
    for (const BlockShard& s : b.block().shards) info.shards.push_back(s.binding.device);
  }
  return info;
}

std::string Model::unitName(int unit) const { return runtime::unitName(unit, int(config_.layers)); }

std::vector<const KvPagePool*> Model::kvPools() const { return pools_->all(); }

KvPagePool& Model::kvPool(Device& device) { return pools_->get(device, 1); }

KvPagePool& Model::kvPool(Device& device, int shards) { return pools_->get(device, shards); }

size_t Model::workspaceBytesEstimate() const {
  const ModelConfig& c = config_;
  const int64_t widths = 2 * std::max(c.embedding, c.heads * c.headDim) + 2 * c.heads * c.headDim +
                         2 * c.kvHeads * c.headDim + 2 * std::max(c.feedForward, c.embedding);
  return size_t(kMaxStepTokens * widths + 64 * c.vocabSize) * sizeof(float);
}

size_t Model::prepareKernels(const std::function<void(size_t done, size_t total)>& progress) {
  return warmUp_->prepareAll(units_, progress);
}

void Model::attachShardTables(Session& session, int unit) const {
  const BlockUnit& block = units_[size_t(unit)].block();
  const int shards = int(block.shards.size());
  const int layer = unit - 1;
  for (int j = 1; j < Session::kMaxShards; j++) {
    KvPagePool* pool = j < shards ? &pools_->get(*block.shards[size_t(j)].binding.device, shards) : nullptr;
    std::vector<PageId> none;
    std::vector<uint8_t*> noAddresses;
    KvPagePool* old = nullptr;
    session.replaceLayer(session.tableOf(layer, j), pool, none, noAddresses, 0, old);
  }
}

void Model::rebindUnit(int unit, Device& device) {
  JITLLM_REQUIRE(unit >= 0 && unit < unitCount(), "no unit ", unit, " in a model of ", unitCount());
  if (isBlock(unit)) {
    for (const Session* s : sessions_.all()) {
      // The page table, not just its live pages: a tiny sliding window can leave a table of freed
      // entries only, which the rebind below cannot take over either.
      for (int j = 0; j < Session::kMaxShards; j++) {
        JITLLM_REQUIRE(s->layerPageTableSize(s->tableOf(unit - 1, j)) == 0, "session ", s->id(), " still holds KV of ",
                       unitName(unit), "; it must end before the unit is re-placed");
      }
    }
  }
  BoundUnit fresh = stage(unit, device);
  units_[size_t(unit)] = std::move(fresh);
  if (!isBlock(unit)) return;
  for (Session* s : sessions_.all()) attachShardTables(*s, unit);
  kvPool(device);
  // Sessions that hold no KV of the layer yet (checked above) take their pages from the new pool.
  for (Session* s : sessions_.all()) {
    std::vector<PageId> none;
    std::vector<uint8_t*> noAddresses;
    s->rebindLayer(unit - 1, kvPool(device), none, noAddresses);
  }
}

void Model::releaseDevice(Device& device) {
  for (int u = 0; u < unitCount(); u++) {
    JITLLM_REQUIRE(&units_[size_t(u)].device() != &device, unitName(u), " still runs on ", device.info().id);
    units_[size_t(u)].forEachBinding([&](const DeviceWeights& w) {
      JITLLM_REQUIRE(w.device != &device, unitName(u), " still runs partly on ", device.info().id);
    });
  }
  pools_->release(device);
  workspaces_->release(device);
}

std::unique_ptr<Session> Model::createSession(int64_t contextLimit) {
  if (contextLimit == 0) contextLimit = config_.contextLength;
  JITLLM_REQUIRE(contextLimit > 0, "context limit must be positive, not ", contextLimit);
  std::vector<KvPagePool*> layerPools;
  std::vector<int64_t> windows;
  for (int l = 0; l < config_.layers; l++) {
    const BlockUnit& block = units_[size_t(l + 1)].block();
    layerPools.push_back(&kvPool(*block.shards.front().binding.device, int(block.shards.size())));
    windows.push_back(config_.slidingLayer(l) ? config_.slidingWindow : 0);
  }
  auto session =
      std::make_unique<Session>(nextSessionId_++, contextLimit, std::move(layerPools), &sessions_, std::move(windows));
  for (int l = 0; l < config_.layers; l++) {
    if (units_[size_t(l + 1)].block().split()) attachShardTables(*session, l + 1);
  }
  return session;
}

// UnitPlacement.

const BoundUnit& Model::binding(int unit) const { return units_.at(size_t(unit)); }

BoundUnit Model::stage(int unit, Device& device) {
  BoundUnit bound = binder_->bind(unit, device);
  warmUp_->warm(unit, bound);
  return bound;
}

BoundUnit Model::stageSplit(int unit, const std::vector<Device*>& devices, bool partialSums) {
  BoundUnit bound = binder_->bindSplit(unit, devices, partialSums);
  for (Device* d : devices) pools_->get(*d, int(devices.size()));
  warmUp_->warm(unit, bound);
  return bound;
}

void Model::swapBinding(int unit, BoundUnit& staged) noexcept { std::swap(units_[size_t(unit)], staged); }

void Model::releaseIdleWorkspaces() noexcept {
  workspaces_->releaseUnless([&](const Device* device) {
    bool used = false;
    for (const BoundUnit& u : units_)
      u.forEachBinding([&](const DeviceWeights& w) { used = used || w.device == device; });
    return used;
  });
}

// The step.

namespace {

// forward()'s logits, appended to the caller's vector on the host.
class LogitsToHost final : public HeadOutput {
 public:
  LogitsToHost(std::vector<float>& logits, int64_t vocab) : logits_(logits), vocab_(vocab) {}
  void take(Device& d, float* rows, int64_t, int64_t n) override {
    const size_t before = logits_.size();
    logits_.resize(before + size_t(n * vocab_));
    d.copyToHost(logits_.data() + before, reinterpret_cast<const uint8_t*>(rows), size_t(n * vocab_) * sizeof(float));
  }

 private:
  std::vector<float>& logits_;
  const int64_t vocab_;
};

// The serving forward()'s candidates, selected on the head's device.
class CandidatesOnDevice final : public HeadOutput {
 public:
  CandidatesOnDevice(std::span<const CandidateRequest> requests, int64_t stride, int64_t vocab,
                     std::vector<int32_t>& ids, std::vector<float>& values)
      : requests_(requests), stride_(stride), vocab_(vocab), ids_(ids), values_(values) {}
  void take(Device& d, float* rows, int64_t first, int64_t n) override {
    d.selectCandidates(rows, n, vocab_, requests_.subspan(size_t(first), size_t(n)), ids_.data() + first * stride_,
                       values_.data() + first * stride_, stride_);
  }

 private:
  std::span<const CandidateRequest> requests_;
  const int64_t stride_, vocab_;
  std::vector<int32_t>& ids_;
  std::vector<float>& values_;
};

}  // namespace

void Model::forward(std::span<const SequenceInput> inputs, std::vector<float>& logits) {
  LogitsToHost output(logits, config_.vocabSize);
  step(inputs, output);
}

void Model::forward(std::span<const SequenceInput> inputs, std::span<const CandidateRequest> requests, int64_t stride,
                    std::vector<int32_t>& ids, std::vector<float>& values) {
  int64_t positions = 0;
  for (const SequenceInput& in : inputs) positions += in.allLogits ? int64_t(in.tokens.size()) : 1;
  JITLLM_REQUIRE(int64_t(requests.size()) == positions, "forward: ", requests.size(), " candidate requests for ",
                 positions, " positions");
  ids.resize(size_t(positions * stride));
  values.resize(size_t(positions * stride));
  CandidatesOnDevice output(requests, stride, config_.vocabSize, ids, values);
  step(inputs, output);
}

void Model::step(std::span<const SequenceInput> inputs, HeadOutput& output) {
  // Everything is checked before any session changes.
  plan_->build(inputs, config_.vocabSize);
  for (const SequenceInput& in : inputs) in.session->reserve(int64_t(in.tokens.size()));
  executor_->run(*plan_, units_, output);
  for (const SequenceInput& in : inputs) in.session->advance(int64_t(in.tokens.size()));
}

}  // namespace jitllm::runtime
