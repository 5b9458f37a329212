// The model's units as the devices running them see them: what the binder (unit_binder.h) makes
// at load, what a LiveMigration or a TensorParallelSwitch stages before its flip, and what the
// step executor reads. Internal to the runtime.
//
// A unit is one of three kinds, each with the fields it has and no others:
//  - EmbeddingUnit: the table of token rows the step starts from;
//  - BlockUnit: a transformer block, as one BlockShard per device it runs on (one unless tensor
//    parallel), each shard its heads' and FFN rows' weights;
//  - HeadUnit: the final norm and the output matrix (the embedding table itself when tied).
// A std::variant rather than one struct with every field: the old struct's `table` meant the
// embedding matrix or the output matrix depending on the unit, and a split block's shards were
// whole units with unused fields. A variant rather than three containers, because a migration
// moves any unit by the same swap (UnitPlacement::swapBinding).
//
// Ownership: each DeviceWeights keeps device copies of its weights (or, on the CPU, views of the
// file mapping, which must outlive them) alive for as long as the binding lives; a streamed
// block owns its pinned host copy.
// Thread-safety: the model's step-loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"
#include "engine/gguf/gguf_file.h"
#include "kernels/device.h"

namespace jitllm::runtime {

// One device's hold on weights: the buffers that keep them there, and how they were bound.
struct DeviceWeights {
  Device* device = nullptr;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  size_t weightBytes = 0;
  bool inDeviceMemory = false;  // copied into device memory; false: read in place from the file
  bool kernelsReady = false;    // its ops have run on `device` (kernels compiled, buffers sized)

  // A whole matrix or vector of the file (a null vector stays null: an architecture without it).
  WeightRef matrix(const gguf::TensorInfo* t);
  const float* vector(const gguf::TensorInfo* t);
  // Rows [begin, begin + rows) of a matrix (contiguous in the file: a view on the CPU).
  WeightRef rows(const gguf::TensorInfo* t, int64_t begin, int64_t rows);
  // Columns [begin, begin + cols) of every row, copied into one buffer of their own (`begin` and
  // `cols` whole quantization blocks).
  WeightRef columns(const gguf::TensorInfo* t, int64_t begin, int64_t cols);
  // Elements [begin, begin + count) of a vector (a shard's biases).
  const float* vectorPart(const gguf::TensorInfo* t, int64_t begin, int64_t count);

 private:
  uint8_t* adopt(const uint8_t* at, size_t bytes);
};

struct EmbeddingUnit {
  DeviceWeights binding;
  WeightRef table;  // one row per token id
};

struct HeadUnit {
  DeviceWeights binding;
  const float* norm = nullptr;
  WeightRef output;  // one row per token id: the logits' weights
};

// A transformer block's weights on one device: the whole block, or one shard's part of it.
struct BlockWeights {
  const float* attnNorm = nullptr;
  const float* ffnNorm = nullptr;
  WeightRef wq, wk, wv, wo, gate, up, down;
  const float* bq = nullptr;  // qwen2's biases
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* qNorm = nullptr;  // per-head norms of q and k (qwen3)
  const float* kNorm = nullptr;
  const float* attnPostNorm = nullptr;  // norms of each branch's output (gemma3)
  const float* ffnPostNorm = nullptr;

  // A fused q|k|v matrix into wq, wk, wv, and a fused gate|up one into gate, up (phi3; either may
  // be unset: {} has no rows).
  void splitFused(const WeightRef& qkv, int64_t qRows, int64_t kvRows, const WeightRef& gateUp, int64_t ffRows);
  // Every weight that points into [from, from + bytes) moved by the same offset to `to`.
  void rebase(const uint8_t* from, const uint8_t* to);
};

// Shard j of a block split over k devices (tensor parallelism; k = 1: the whole block). Its wq,
// wk, wv, gate, up (and biases) are its rows; wo and down its columns where the block's woSplit /
// downSplit say so, else shard 0 holds them whole and the others none. Shard 0 also holds the
// post norms, which apply to the whole branch output on its device.
struct BlockShard {
  DeviceWeights binding;
  BlockWeights weights;
};

// A streamed block's weights (a model larger than its device): they wait in pinned host memory
// laid out as they will be in a device slot, and visit the device each step (StepExecutor).
struct StreamSource {
  static constexpr size_t kAlignment = 256;
  std::unique_ptr<HostBuffer> bytes;
  size_t size = 0;
  // Where the block's weights point now: into `bytes` until the first upload, then into the slot
  // the block was last uploaded to.
  const uint8_t* base = nullptr;
};

struct BlockUnit {
  // The hidden state's device first (it runs the products that are not split).
  std::vector<BlockShard> shards;
  bool partialSums = false;  // asked for (UnitBinder::bindSplit); woSplit/downSplit say where it applies
  bool woSplit = false;
  bool downSplit = false;
  std::unique_ptr<StreamSource> stream;  // null: resident on its device

  bool split() const { return shards.size() > 1; }
  // Points a streamed block's weights at the copy that starts at `base` (a slot it was uploaded to).
  void rebase(const uint8_t* base);
};

enum class UnitKind { kEmbedding, kBlock, kHead };  // in the variant's order

// One unit of the model, one of the three kinds.
class BoundUnit final {
 public:
  explicit BoundUnit(EmbeddingUnit u) : unit_(std::move(u)) {}
  explicit BoundUnit(BlockUnit u) : unit_(std::move(u)) {}
  explicit BoundUnit(HeadUnit u) : unit_(std::move(u)) {}

  UnitKind kind() const { return UnitKind(unit_.index()); }
  bool isBlock() const { return kind() == UnitKind::kBlock; }
  // The unit as its kind; asking a unit for another kind is a bug (JITLLM_ASSERT).
  EmbeddingUnit& embedding() { return as<EmbeddingUnit>(*this); }
  const EmbeddingUnit& embedding() const { return as<const EmbeddingUnit>(*this); }
  BlockUnit& block() { return as<BlockUnit>(*this); }
  const BlockUnit& block() const { return as<const BlockUnit>(*this); }
  HeadUnit& head() { return as<HeadUnit>(*this); }
  const HeadUnit& head() const { return as<const HeadUnit>(*this); }

  // Where the hidden state is while the unit runs: a split block's first shard's device.
  Device& device() const { return *primary().device; }
  // The first device's binding (the only one unless a split block).
  const DeviceWeights& primary() const { return primaryOf(*this); }
  DeviceWeights& primary() { return primaryOf(*this); }
  bool streamed() const { return isBlock() && block().stream != nullptr; }
  // Each device's binding: one, or a split block's shards in order.
  template <class F>
  void forEachBinding(F&& f) {
    forEachBindingOf(*this, f);
  }
  template <class F>
  void forEachBinding(F&& f) const {
    forEachBindingOf(*this, f);
  }
  size_t weightBytes() const;  // over every device

 private:
  // One body for the const and mutable accessors: Self is BoundUnit or const BoundUnit.
  template <class T, class Self>
  static T& as(Self& self) {
    T* u = std::get_if<std::remove_const_t<T>>(&self.unit_);
    JITLLM_ASSERT(u != nullptr);
    return *u;
  }
  template <class Self>
  static std::conditional_t<std::is_const_v<Self>, const DeviceWeights&, DeviceWeights&> primaryOf(Self& self) {
    return std::visit(
        [](auto& u) -> auto& {
          if constexpr (requires { u.shards; }) {
            return u.shards.front().binding;
          } else {
            return u.binding;
          }
        },
        self.unit_);
  }
  template <class Self, class F>
  static void forEachBindingOf(Self& self, F& f) {
    std::visit(
        [&](auto& u) {
          if constexpr (requires { u.shards; }) {
            for (auto& s : u.shards) f(s.binding);
          } else {
            f(u.binding);
          }
        },
        self.unit_);
  }
  std::variant<EmbeddingUnit, BlockUnit, HeadUnit> unit_;
};

}  // namespace jitllm::runtime
