// The tensors of a model, found by their GGUF names and checked against its config.
//
// Every tensor the graph will read is looked up once here and its type and shape validated, so a
// missing or malformed tensor is an Error(FAILED) naming it (and the file) at load time, never a
// crash mid-generation. Pointers are into the GgufFile, which must outlive this.
//
// Thread-safety: immutable after construction.
#pragma once

#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/runtime/model_config.h"

namespace jitllm::runtime {

struct BlockTensors {
  const gguf::TensorInfo* attnNorm = nullptr;
  const gguf::TensorInfo* wqkv = nullptr;    // phi3: q, k and v rows in one matrix (then wq/wk/wv null)
  const gguf::TensorInfo* gateUp = nullptr;  // phi3: ffn_up holding gate's rows, then up's
  const gguf::TensorInfo* wq = nullptr;
  const gguf::TensorInfo* wk = nullptr;
  const gguf::TensorInfo* wv = nullptr;
  const gguf::TensorInfo* wo = nullptr;
  const gguf::TensorInfo* bq = nullptr;  // qwen2 only
  const gguf::TensorInfo* bk = nullptr;
  const gguf::TensorInfo* bv = nullptr;
  const gguf::TensorInfo* qNorm = nullptr;  // qwen3 only: [headDim] each
  const gguf::TensorInfo* kNorm = nullptr;
  const gguf::TensorInfo* ffnNorm = nullptr;
  const gguf::TensorInfo* attnPostNorm = nullptr;  // gemma3 only: [embedding] each
  const gguf::TensorInfo* ffnPostNorm = nullptr;
  const gguf::TensorInfo* gate = nullptr;
  const gguf::TensorInfo* up = nullptr;
  const gguf::TensorInfo* down = nullptr;

  size_t bytes() const;  // all of the block's weights
};

struct ModelTensors {
  const gguf::TensorInfo* tokenEmbedding = nullptr;
  const gguf::TensorInfo* outputNorm = nullptr;
  const gguf::TensorInfo* output = nullptr;  // == tokenEmbedding when tied
  // Frequency divisors, optional: llama3's rope_freqs, or phi3's rope_factors_long / _short as
  // config.longRopeFactors() picks.
  const gguf::TensorInfo* ropeFreqs = nullptr;
  std::vector<BlockTensors> blocks;

  // Also fills config.vocabSize from the embedding's shape.
  static ModelTensors find(const gguf::GgufFile& file, ModelConfig& config);
};

}  // namespace jitllm::runtime
