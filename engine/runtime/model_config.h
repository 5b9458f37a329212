// The hyperparameters of a transformer, read from a GGUF file's metadata.
//
// One struct for every architecture the runtime knows; `arch` selects the few graph differences
// (qwen2: QKV biases and NEOX rope; qwen3: NEOX rope, an RMS norm of each head of q and k before
// it, and heads whose width is not embedding / heads; granite: multipliers of the embeddings, the
// residual branches, the attention scores and the logits; phi3: fused QKV and gate/up matrices,
// NEOX rope with LongRoPE factors and their attention factor; gemma3: embeddings times sqrt(d),
// norms after attention and the FFN as well as before, a GELU-gated FFN, q/k norms,
// sliding-window layers with their own rope base among global ones, an optional logit soft-cap).
// Reading validates everything the forward pass relies on, so later code can trust it: a missing
// or inconsistent key is an Error(FAILED) naming the key and the file, an unknown architecture one
// naming the architecture.
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jitllm::gguf {
class GgufFile;
}

namespace jitllm::runtime {

enum class Architecture { kLlama, kQwen2, kQwen3, kGranite, kPhi3, kGemma3 };
const char* architectureName(Architecture arch);

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string archKey;  // the GGUF prefix: "llama", "qwen2", "qwen3"
  std::string name;     // general.name, or the file name
  int64_t vocabSize = 0;
  int64_t contextLength = 0;  // trained context
  int64_t embedding = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;  // attention.key_length, else embedding / heads
  int64_t feedForward = 0;
  int64_t rotaryDims = 0;
  float ropeFreqBase = 10000.0f;
  float ropeFreqScale = 1.0f;  // 1 / linear scaling factor
  bool ropeNeox = false;
  float rmsEps = 1e-5f;
  bool qkvBias = false;
  bool qkNorm = false;  // attn_q_norm / attn_k_norm: RMS norm of each head of q and k before rope
  // Granite's multipliers (0: not applied): embeddings times embeddingScale, each block's
  // attention and FFN outputs times residualScale before they join the residual, attention
  // scores times attentionScale instead of 1/sqrt(headDim), logits divided by logitScale.
  float embeddingScale = 0;
  float residualScale = 0;
  float attentionScale = 0;
  float logitScale = 1;
  // Gemma3. The FFN's gate activation: SiLU (SwiGLU), or GELU's tanh form (GEGLU).
  bool geluFfn = false;
  // attn_post_norm / ffn_post_norm: RMS norms of each branch's output before it joins the residual.
  bool postNorms = false;
  // Sliding-window attention (0: none): layer l attends to the last slidingWindow positions only
  // when slidingLayers[l], with rope base and scale of their own.
  int64_t slidingWindow = 0;
  std::vector<bool> slidingLayers;  // per layer; empty without a window
  float ropeFreqBaseSliding = 10000.0f;
  float ropeFreqScaleSliding = 1.0f;
  // final_logit_softcapping (0: none): logits become cap * tanh(logits / cap).
  float logitSoftcap = 0;
  bool slidingLayer(int64_t layer) const { return slidingWindow > 0 && slidingLayers[size_t(layer)]; }

  // LongRoPE (phi3): the context the short factors are for (rope.scaling.original_context_length;
  // 0 when absent), and the factor rope multiplies q and k by (rope.scaling.attn_factor).
  int64_t ropeOriginalContext = 0;
  float ropeAttnFactor = 1;
  // The longest context the model is loaded for (ModelLoadOptions::contextSize, at most the trained
  // one; set by Model, not read from the file).
  int64_t servedContext = 0;
  // Which LongRoPE factors the model uses: the long ones when the context it serves exceeds the
  // original one, as llama.cpp chooses for its context size.
  bool longRopeFactors() const {
    const int64_t served = servedContext > 0 ? servedContext : contextLength;
    return ropeOriginalContext > 0 && served > ropeOriginalContext;
  }

  static ModelConfig fromGguf(const gguf::GgufFile& file);
};

}  // namespace jitllm::runtime
