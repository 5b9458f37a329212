#include "engine/runtime/model_tensors.h"

#include <string>

#include "base/error.h"

namespace jitllm::runtime {
namespace {

class TensorFinder final {
 public:
  explicit TensorFinder(const gguf::GgufFile& file) : file_(file) {}

  // A 2-D weight [cols (row length), rows] of a type the kernels compute with.
  const gguf::TensorInfo* matrix(const std::string& name, int64_t cols, int64_t rows) const {
    const gguf::TensorInfo* t = require(name);
    JITLLM_REQUIRE(t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows, file_.name(), ": tensor '", name,
                   "' has shape ", t->shapeString(), ", expected [", cols, ", ", rows, "]");
    JITLLM_REQUIRE(quant::typeTraits(t->type).computable, file_.name(), ": tensor '", name, "' has type ",
                   quant::typeName(t->type), ", which jitllm cannot compute with yet");
    return t;
  }

  // A 1-D float32 vector of n values (norm weights, biases, rope factors).
  const gguf::TensorInfo* vector(const std::string& name, int64_t n) const {
    const gguf::TensorInfo* t = require(name);
    return checkVector(t, n);
  }
  const gguf::TensorInfo* optionalVector(const std::string& name, int64_t n) const {
    const gguf::TensorInfo* t = file_.findTensor(name);
    return t ? checkVector(t, n) : nullptr;
  }

 private:
  const gguf::TensorInfo* require(const std::string& name) const {
    const gguf::TensorInfo* t = file_.findTensor(name);
    JITLLM_REQUIRE(t != nullptr, file_.name(), ": missing tensor '", name, "'");
    return t;
  }
  const gguf::TensorInfo* checkVector(const gguf::TensorInfo* t, int64_t n) const {
    int64_t elements = t->elements();
    JITLLM_REQUIRE(elements == n && t->dims[0] == n, file_.name(), ": tensor '", t->name, "' has shape ",
                   t->shapeString(), ", expected [", n, "]");
    JITLLM_REQUIRE(t->type == quant::TensorType::kF32, file_.name(), ": tensor '", t->name, "' has type ",
                   quant::typeName(t->type), ", expected f32");
    return t;
  }

  const gguf::GgufFile& file_;
};

}  // namespace

size_t BlockTensors::bytes() const {
  size_t n = 0;
  for (const gguf::TensorInfo* t : {attnNorm, wqkv, gateUp, wq, wk, wv, wo, bq, bk, bv, qNorm, kNorm, ffnNorm,
                                    attnPostNorm, ffnPostNorm, gate, up, down}) {
    if (t) n += t->nbytes;
  }
  return n;
}

ModelTensors ModelTensors::find(const gguf::GgufFile& file, ModelConfig& c) {
  TensorFinder find(file);
  ModelTensors m;
  const gguf::TensorInfo* embd = file.findTensor("token_embd.weight");
  JITLLM_REQUIRE(embd != nullptr, file.name(), ": missing tensor 'token_embd.weight'");
  JITLLM_REQUIRE(embd->dims.size() == 2, file.name(), ": tensor 'token_embd.weight' has shape ", embd->shapeString(),
                 ", expected 2 dimensions");
  c.vocabSize = embd->dims[1];
  m.tokenEmbedding = find.matrix("token_embd.weight", c.embedding, c.vocabSize);
  m.outputNorm = find.vector("output_norm.weight", c.embedding);
  m.output =
      file.findTensor("output.weight") ? find.matrix("output.weight", c.embedding, c.vocabSize) : m.tokenEmbedding;
  m.ropeFreqs = find.optionalVector("rope_freqs.weight", c.rotaryDims / 2);
  if (c.arch == Architecture::kPhi3) {
    m.ropeFreqs = find.optionalVector(c.longRopeFactors() ? "rope_factors_long.weight" : "rope_factors_short.weight",
                                      c.rotaryDims / 2);
  }
  const int64_t qDim = c.heads * c.headDim;
  const int64_t kvDim = c.kvHeads * c.headDim;
  for (int64_t i = 0; i < c.layers; i++) {
    const std::string p = "blk." + std::to_string(i) + ".";
    BlockTensors b;
    b.attnNorm = find.vector(p + "attn_norm.weight", c.embedding);
    if (c.arch == Architecture::kPhi3 && file.findTensor(p + "attn_qkv.weight")) {
      b.wqkv = find.matrix(p + "attn_qkv.weight", c.embedding, qDim + 2 * kvDim);
    } else {
      b.wq = find.matrix(p + "attn_q.weight", c.embedding, qDim);
      b.wk = find.matrix(p + "attn_k.weight", c.embedding, kvDim);
      b.wv = find.matrix(p + "attn_v.weight", c.embedding, kvDim);
    }
    b.wo = find.matrix(p + "attn_output.weight", qDim, c.embedding);
    if (c.qkvBias) {
      b.bq = find.vector(p + "attn_q.bias", qDim);
      b.bk = find.vector(p + "attn_k.bias", kvDim);
      b.bv = find.vector(p + "attn_v.bias", kvDim);
    }
    if (c.qkNorm) {
      b.qNorm = find.vector(p + "attn_q_norm.weight", c.headDim);
      b.kNorm = find.vector(p + "attn_k_norm.weight", c.headDim);
    }
    b.ffnNorm = find.vector(p + "ffn_norm.weight", c.embedding);
    if (c.postNorms) {
      b.attnPostNorm = find.vector(p + "post_attention_norm.weight", c.embedding);
      b.ffnPostNorm = find.vector(p + "post_ffw_norm.weight", c.embedding);
    }
    if (c.arch == Architecture::kPhi3) {
      b.gateUp = find.matrix(p + "ffn_up.weight", c.embedding, 2 * c.feedForward);
    } else {
      b.gate = find.matrix(p + "ffn_gate.weight", c.embedding, c.feedForward);
      b.up = find.matrix(p + "ffn_up.weight", c.embedding, c.feedForward);
    }
    b.down = find.matrix(p + "ffn_down.weight", c.feedForward, c.embedding);
    m.blocks.push_back(b);
  }
  return m;
}

}  // namespace jitllm::runtime
