// A loaded model: its file, config and tensors, its layers bound to devices, the KV page pools
// those devices give it, and the forward pass over a batch of sessions.
//
// The schedulable units are the embedding (unit 0), the transformer blocks (units 1..L) and the
// output head (unit L+1). Each is bound to one Device; a forward step walks the units in order
// and moves the hidden state across a device boundary only where two neighbours differ. On the
// CPU, weights are read in place from the mmapped file (no copy).
//
// forward() batches any number of sessions (prefill and decode mixed): all their tokens run
// through each layer together, in microbatches of at most kMaxStepTokens, and each session's
// result is exactly what it would get alone (every kernel computes a token's row independently of
// the others in the batch).
//
// Tensor parallelism: a block may be split over k devices (k = 2 or 4 dividing the KV heads and
// the FFN width): each runs its share of the attention heads (with their KV heads, whose pages it
// keeps) and of the FFN rows; the output projection and the FFN's down projection run whole on the
// block's first device over the shards' outputs gathered there, so a split model computes one
// device's bits exactly. With partialSums they take their columns too (where those split at
// whole quantization blocks), their partial sums added on the first device in shard order: less
// work on the first device, but the reassociated sums move the integer kernels' activation
// rounding downstream (logits within NMSE ~1e-9 of one device's; float weights ~1e-14). The
// hidden state lives on the first device (the block's first shard's) and reaches the others twice
// a block. Load with ModelLoadOptions::tensorParallel, or switch a running model with a
// TensorParallelSwitch (tensor_parallel_switch.h).
//
// A unit's device changes only through a LiveMigration (live_migration.h), which stages the unit
// on its target between steps and flips it at a token boundary; both it and the switch act
// through UnitPlacement (unit_placement.h), the one door into the units.
//
// The parts (each in its own file pair under engine/runtime/): a UnitBinder binds the units
// (bound_unit.h: embedding, block with its shards, head), a StepPlan lays out each step's tokens
// (validation, microbatches, prompt rows, KV tables, head rows), a StepExecutor runs it through the
// units on their devices, a BlockGraph holds the one transformer block all architectures share,
// UnitWarmUp makes kernels ready; Workspaces and KvPools hold the memory a step reuses.
//
// Ownership: owns the file mapping, the bound weights and the KV pools; sessions it creates
// borrow its pools and must be destroyed first. Devices are borrowed and must outlive the model.
// Thread-safety: forward(), createSession() and migrations from one thread at a time (the
// model's step loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/model_tensors.h"
#include "engine/runtime/session.h"
#include "engine/runtime/unit_placement.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/device.h"

namespace jitllm::runtime {

// The model's parts, internal to the runtime (each header says what it owns).
class BoundUnit;     // bound_unit.h
class UnitBinder;    // unit_binder.h
class KvPools;       // engine/kv/kv_pools.h
class Workspaces;    // workspace.h
class BlockGraph;    // block_graph.h
class UnitWarmUp;    // unit_warm_up.h
class StepPlan;      // step_plan.h
class StepExecutor;  // step_executor.h
class HeadOutput;    // step_executor.h

// The placement a device list has always meant: blocks spread over `devices` in order, the
// embedding with the first block and the head with the last. One index per unit (layers + 2).
std::vector<int> evenPlacement(int layers, int devices);

struct ModelLoadOptions {
  std::vector<Device*> devices;  // at least one; blocks are spread over them in order
  // The longest context its sessions will have (0: the trained context). Only a model whose rope
  // depends on it reads it: phi3's LongRoPE takes its long factors past the original context, as
  // llama.cpp does for its context size (n_ctx), so the two agree on the same file and context.
  int64_t contextSize = 0;
  // Optional explicit placement: one index into `devices` per unit (layers + 2). Empty: blocks
  // split evenly in order, the embedding with the first block, the head with the last.
  std::vector<int> placement;
  // Or a placer that chooses it once the file's unit sizes are known (the daemon's placement on
  // load): given each unit's weight bytes, the KV bytes one token takes in one block, the model's
  // trained context and the activation memory a device running part of it needs (a full
  // microbatch), it returns one index into `devices` per unit. Used when `placement` is empty.
  std::function<std::vector<int>(const std::vector<size_t>& unitWeightBytes, size_t kvBytesPerTokenPerBlock,
                                 int64_t trainedContext, size_t workspaceBytes)>
      placer;
  // Optional, per unit: stream this block's weights through its device's memory instead of
  // keeping them there (a model larger than the device; see Model::forward). Blocks on GPUs only.
  std::vector<bool> streamed;
  // Devices every block is split over (tensor parallelism): the first `tensorParallel` of
  // `devices`, which must then be distinct and hold every unit (placement, placer and streaming
  // are for 1). 1: none.
  int tensorParallel = 1;
  bool partialSums = false;  // see the comment at the top
  int kvPageTokens = 16;
  // fp32 by default: attention then stays as exact as the rest of the pass (see KvPrecision).
  KvPrecision kvPrecision = KvPrecision::kF32;
};

// Where one unit stands (jitllmctl ps -l).
struct UnitInfo {
  Device* device = nullptr;
  bool inDeviceMemory = false;  // weights copied into device memory; false: read in place from the file
  size_t weightBytes = 0;
  bool kernelsReady = false;  // its ops have run on `device` (kernels compiled, buffers sized)
  bool streamed = false;      // weights wait in pinned host memory and visit `device` each step
  // A tensor-parallel block's devices, `device` first; empty on one device.
  std::vector<Device*> shards;
};

// The prompt length from which the step loop (so also jitllm-bench) feeds a prompt on the devices'
// prompt path: where CUDA's fp16 tensor cores, which decode every weight to fp16 once per step, overtake
// decode's integer kernels for that step (estimated from the H200's figures: docs/cuda.md).
inline constexpr int64_t kPromptPathMinTokens = 128;

// One session's share of a step: tokens to feed and which logits to return.
struct SequenceInput {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  bool allLogits = false;  // every position's logits (scoring); else only the last token's
  // The first promptTokens tokens are a prompt's, whose products a device may compute on its prompt
  // path (Device::setPromptRows; CUDA: fp16 tensor cores; CPU: byte activations): their bits depend
  // only on each token's own row - the same in any batch and however the prompt is chunked - but
  // are not token-by-token decode's. The step loop leaves out a prompt's last token, whose logits
  // pick the first output token, so that token is computed alike wherever the chunks end, and
  // short prompts (StepLoop::Options::promptPathMinTokens). 0: decode's bits for all.
  int64_t promptTokens = 0;
};

class Model final : private UnitPlacement {
 public:
  // Tokens per microbatch: bounds activation memory (a few MB per device for 1B-class models)
  // while keeping the matrix kernels' tiles full.
  static constexpr int64_t kMaxStepTokens = 512;

  static std::unique_ptr<Model> load(const std::string& path, const ModelLoadOptions& options);
  static std::unique_ptr<Model> fromFile(std::unique_ptr<gguf::GgufFile> file, const ModelLoadOptions& options);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const gguf::GgufFile& file() const { return *file_; }
  const ModelTensors& tensors() const { return tensors_; }
  // The tokenizer from the file's tokenizer.ggml.* keys; Error(FAILED) naming the file when it
  // has none (a weights-only file can still run on token ids).
  const tokenizer::Tokenizer& tokenizer() const;
  bool hasTokenizer() const { return tokenizer_ != nullptr; }

  int unitCount() const;
  // Every device the model touches: its units' and its KV pools' (a step, or freeing sessions).
  std::vector<Device*> devices() const;
  Device& unitDevice(int unit) const;
  UnitInfo unitInfo(int unit) const;
  std::string unitName(int unit) const;  // "token_embd", "blk.3", "output"
  const KvLayout& kvLayout() const { return kvLayout_; }
  // Activation memory a device running part of the model needs at most (a full microbatch, and the
  // logits of a decode step of a few dozen sessions): what placement reserves for it.
  size_t workspaceBytesEstimate() const;
  KvPagePool& kvPool(Device& device);
  // The pool of a device holding one of `shards` shards of the KV heads (shards 1: kvPool(device)).
  KvPagePool& kvPool(Device& device, int shards);
  // Every KV pool the model has made, with its device (also those no layer uses any more).
  std::vector<const KvPagePool*> kvPools() const;
  const SessionRegistry& sessions() const { return sessions_; }
  // The narrow door through which a LiveMigration or a TensorParallelSwitch re-binds units
  // (unit_placement.h); nothing else needs it.
  UnitPlacement& placement() { return *this; }

  // Binds `unit` again on `device` from the file's weights and warms its kernels there: how a
  // model is re-placed after the device it ran on went away. For a block, no session may hold
  // KV pages of it any more (Error(FAILED) otherwise). Not during a migration.
  void rebindUnit(int unit, Device& device);
  // Makes every kernel the model's steps can meet ready where each unit runs (Device::prepareKernels:
  // compiled ahead, in parallel, for every token count a step can give an op), then runs each unit
  // once so its workspace is sized: after this no request waits for a compile. `progress` (may be
  // empty) hears each device as it is done (done, total). Returns the kernel modules made.
  // Caller: the thread that drives the model's devices (it takes their locks, DeviceLocks).
  size_t prepareKernels(const std::function<void(size_t done, size_t total)>& progress = {});
  // Forgets `device`: its KV pools (which must be empty) and its workspace. Error(FAILED) while a
  // unit still runs there.
  void releaseDevice(Device& device);

  // contextLimit 0: the model's trained context length.
  std::unique_ptr<Session> createSession(int64_t contextLimit = 0);

  // Runs the inputs through the model and appends logits (vocabSize floats per returned
  // position, inputs in order) to `logits`. Validates everything (token ids, context limits,
  // duplicate sessions) before any session changes; on an exception no session has advanced.
  void forward(std::span<const SequenceInput> inputs, std::vector<float>& logits);
  // The same step, but instead of its logits each returned position's next-token candidates,
  // selected on the device that ran the head (Device::selectCandidates): requests[i] for the i-th
  // returned position; ids and values are resized to (positions x stride), row i at i * stride.
  // What a serving step needs: the rows of logits never leave the device.
  void forward(std::span<const SequenceInput> inputs, std::span<const CandidateRequest> requests, int64_t stride,
               std::vector<int32_t>& ids, std::vector<float>& values);

 private:
  Model(std::unique_ptr<gguf::GgufFile> file, const ModelLoadOptions& options);
  bool isBlock(int unit) const { return unit > 0 && unit < unitCount() - 1; }
  // Gives a session the KV tables `unit`'s binding needs (its shards' pools), holding no pages.
  void attachShardTables(Session& session, int unit) const;
  // The step both forward()s run: `output` gets each microbatch's logits on the head's device.
  void step(std::span<const SequenceInput> inputs, HeadOutput& output);

  // UnitPlacement (unit_placement.h).
  const BoundUnit& binding(int unit) const override;
  BoundUnit stage(int unit, Device& device) override;
  BoundUnit stageSplit(int unit, const std::vector<Device*>& devices, bool partialSums) override;
  void swapBinding(int unit, BoundUnit& staged) noexcept override;
  void releaseIdleWorkspaces() noexcept override;

  // In the order they are made: each part below borrows those above it.
  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  ModelTensors tensors_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  KvLayout kvLayout_;
  std::unique_ptr<UnitBinder> binder_;
  std::unique_ptr<KvPools> pools_;
  std::unique_ptr<Workspaces> workspaces_;
  std::unique_ptr<BlockGraph> graph_;
  std::unique_ptr<UnitWarmUp> warmUp_;
  std::unique_ptr<StepPlan> plan_;
  std::unique_ptr<StepExecutor> executor_;
  std::vector<BoundUnit> units_;  // embedding, blocks, head
  SessionRegistry sessions_;
  uint64_t nextSessionId_ = 1;
};

}  // namespace jitllm::runtime
