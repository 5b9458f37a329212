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
// Ownership: owns the file mapping, the bound weights and the KV pools; sessions it creates
// borrow its pools and must be destroyed first. Devices are borrowed and must outlive the model.
// Thread-safety: forward() and createSession() from one thread at a time (the model's step loop).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/gguf/gguf_file.h"
#include "daemon/runtime/kv_page_pool.h"
#include "daemon/runtime/model_config.h"
#include "daemon/runtime/model_tensors.h"
#include "daemon/runtime/session.h"
#include "daemon/tokenizer/tokenizer.h"
#include "kernels/device.h"

namespace jitllm::runtime {

struct ModelLoadOptions {
  std::vector<Device*> devices;  // at least one; blocks are spread over them in order
  // Optional explicit placement: one index into `devices` per unit (layers + 2). Empty: blocks
  // split evenly in order, the embedding with the first block, the head with the last.
  std::vector<int> placement;
  int kvPageTokens = 16;
  // fp32 by default: attention then stays as exact as the rest of the pass (see KvPrecision).
  KvPrecision kvPrecision = KvPrecision::kF32;
};

// One session's share of a step: tokens to feed and which logits to return.
struct SequenceInput {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  bool allLogits = false;  // every position's logits (scoring); else only the last token's
};

class Model final {
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
  Device& unitDevice(int unit) const;
  std::string unitName(int unit) const;  // "token_embd", "blk.3", "output"
  const KvLayout& kvLayout() const { return kvLayout_; }
  KvPagePool& kvPool(Device& device);

  // contextLimit 0: the model's trained context length.
  std::unique_ptr<Session> createSession(int64_t contextLimit = 0);

  // Runs the inputs through the model and appends logits (vocabSize floats per returned
  // position, inputs in order) to `logits`. Validates everything (token ids, context limits,
  // duplicate sessions) before any session changes; on an exception no session has advanced.
  void forward(std::span<const SequenceInput> inputs, std::vector<float>& logits);

 private:
  struct BoundUnit;
  struct Workspace;

  Model() = default;
  void bind(const ModelLoadOptions& options);
  Workspace& workspace(Device& device, int64_t tokens);
  void runBlock(int layer, Workspace& ws, int64_t tokens, const int32_t* positions,
                Session* const* sessions);

  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  ModelTensors tensors_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  KvLayout kvLayout_;
  std::vector<BoundUnit> units_;
  std::map<Device*, std::unique_ptr<KvPagePool>> pools_;
  std::map<Device*, std::unique_ptr<Workspace>> workspaces_;
  std::vector<float> ropeFactors_;
  uint64_t nextSessionId_ = 1;
};

}  // namespace jitllm::runtime
