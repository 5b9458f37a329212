#include "engine/runtime/model_config.h"

#include <cmath>
#include <optional>

#include "base/error.h"
#include "engine/gguf/gguf_file.h"

namespace jitllm::runtime {

const char* architectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kGranite:
      return "granite";
    case Architecture::kPhi3:
      return "phi3";
    case Architecture::kGemma3:
      return "gemma3";
  }
  return "unknown";
}

namespace {

// Bounds far above any real model that keep sizes computed from them far from overflow.
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxLayers = 4096;

int64_t requireInt(const gguf::GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  auto v = f.getInt(key);
  JITLLM_REQUIRE(v.has_value(), f.name(), ": missing metadata key '", key, "'");
  JITLLM_REQUIRE(*v >= lo && *v <= hi, f.name(), ": metadata key '", key, "' is ", *v, ", outside [", lo, ", ", hi,
                 "]");
  return *v;
}

// A multiplier: finite and positive when present (absent: `absent`).
float requireScale(const gguf::GgufFile& f, const std::string& key, bool required, float absent) {
  const std::optional<double> v = f.getFloat(key);
  JITLLM_REQUIRE(v.has_value() || !required, f.name(), ": missing metadata key '", key, "'");
  if (!v) return absent;
  JITLLM_REQUIRE(std::isfinite(*v) && *v > 0 && *v < 1e6, f.name(), ": metadata key '", key, "' is ", *v,
                 ", not a positive finite multiplier");
  return float(*v);
}

void readGraniteMultipliers(const gguf::GgufFile& f, const std::string& p, ModelConfig& c) {
  c.logitScale = requireScale(f, p + "logit_scale", true, 1.0f);
  c.embeddingScale = requireScale(f, p + "embedding_scale", false, 0.0f);
  c.residualScale = requireScale(f, p + "residual_scale", false, 0.0f);
  c.attentionScale = requireScale(f, p + "attention.scale", false, 0.0f);
  // Granite turns rope off with rope.scaling.finetuned = false (no model does so yet).
  if (const gguf::Value* finetuned = f.find(p + "rope.scaling.finetuned")) {
    const std::optional<bool> on = finetuned->asBool();
    JITLLM_REQUIRE(!on || *on, f.name(), ": metadata key '", p,
                   "rope.scaling.finetuned' is false: a granite model without rope is not supported");
  }
}

// Gemma3's sliding-window layers: attention.sliding_window (absent or 0: every layer global) and
// attention.sliding_window_pattern, a period N (layer l slides unless l % N == N - 1; llama.cpp's
// default 6) or one bool per layer (true: sliding).
void readSlidingWindow(const gguf::GgufFile& f, const std::string& p, ModelConfig& c) {
  const std::string windowKey = p + "attention.sliding_window";
  if (!f.find(windowKey)) return;
  c.slidingWindow = requireInt(f, windowKey, 0, int64_t(1) << 24);
  if (c.slidingWindow == 0) return;
  c.slidingLayers.assign(size_t(c.layers), false);
  const std::string patternKey = p + "attention.sliding_window_pattern";
  const gguf::Value* pattern = f.find(patternKey);
  if (pattern && pattern->asArray()) {
    const gguf::Array& flags = *pattern->asArray();
    JITLLM_REQUIRE(flags.elementType == gguf::ValueType::kBool && int64_t(flags.size()) == c.layers, f.name(),
                   ": metadata key '", patternKey, "' is an array of ", flags.size(),
                   " elements, not one bool per layer (", c.layers, ")");
    for (size_t l = 0; l < flags.size(); l++) c.slidingLayers[l] = *flags.at(l).asBool();
  } else {
    const int64_t period = pattern ? requireInt(f, patternKey, 0, kMaxLayers) : 6;
    for (int64_t l = 0; l < c.layers; l++) c.slidingLayers[size_t(l)] = period == 0 || l % period < period - 1;
  }
  const std::optional<double> base = f.getFloat(p + "rope.freq_base_swa");
  if (base) {
    JITLLM_REQUIRE(std::isfinite(*base) && *base > 0, f.name(), ": metadata key '", p, "rope.freq_base_swa' is ", *base,
                   ", not a positive base");
    c.ropeFreqBaseSliding = float(*base);
  }
}

void readGemma3(const gguf::GgufFile& f, const std::string& p, ModelConfig& c) {
  c.geluFfn = true;
  c.postNorms = true;
  // sqrt(d) rounded to float, as llama.cpp multiplies by sqrtf(n_embd).
  c.embeddingScale = std::sqrt(float(c.embedding));
  // Query scale 1/sqrt(query_pre_attn_scalar): the head width, except the 27B (62 layers) whose
  // scalar is embedding / heads (gemma_pytorch's config, as llama.cpp encodes it).
  c.attentionScale =
      c.layers == 62 ? 1.0f / std::sqrt(float(c.embedding / c.heads)) : 1.0f / std::sqrt(float(c.headDim));
  readSlidingWindow(f, p, c);
  c.logitSoftcap = requireScale(f, p + "final_logit_softcapping", false, 0.0f);
}

}  // namespace

ModelConfig ModelConfig::fromGguf(const gguf::GgufFile& f) {
  ModelConfig c;
  auto arch = f.getString("general.architecture");
  JITLLM_REQUIRE(arch.has_value(), f.name(), ": missing metadata key 'general.architecture'");
  if (*arch == "llama") {
    c.arch = Architecture::kLlama;
  } else if (*arch == "qwen2") {
    c.arch = Architecture::kQwen2;
    c.ropeNeox = true;
    c.qkvBias = true;
  } else if (*arch == "qwen3") {
    c.arch = Architecture::kQwen3;
    c.ropeNeox = true;
    c.qkNorm = true;
  } else if (*arch == "granite") {
    c.arch = Architecture::kGranite;
  } else if (*arch == "phi3") {
    c.arch = Architecture::kPhi3;
    c.ropeNeox = true;
  } else if (*arch == "gemma3") {
    c.arch = Architecture::kGemma3;
    c.ropeNeox = true;
    c.qkNorm = true;
  } else {
    JITLLM_FAIL(kUnimplemented, f.name(), ": unsupported architecture '", *arch,
                "' (supported: llama, qwen2, qwen3, granite, phi3, gemma3)");
  }
  c.archKey = *arch;
  const std::string p = c.archKey + ".";
  c.name = f.getString("general.name").value_or(f.name());
  c.embedding = requireInt(f, p + "embedding_length", 1, kMaxDim);
  c.layers = requireInt(f, p + "block_count", 1, kMaxLayers);
  c.heads = requireInt(f, p + "attention.head_count", 1, kMaxDim);
  c.kvHeads =
      f.find(p + "attention.head_count_kv") ? requireInt(f, p + "attention.head_count_kv", 1, c.heads) : c.heads;
  c.feedForward = requireInt(f, p + "feed_forward_length", 1, kMaxDim * 4);
  c.contextLength = f.find(p + "context_length") ? requireInt(f, p + "context_length", 1, int64_t(1) << 24) : 2048;
  JITLLM_REQUIRE(c.heads % c.kvHeads == 0, f.name(), ": head_count ", c.heads, " is not a multiple of head_count_kv ",
                 c.kvHeads);
  if (f.find(p + "attention.key_length")) {
    // Heads of their own width (qwen3: 16 heads of 128 on a 1024-wide model).
    c.headDim = requireInt(f, p + "attention.key_length", 2, 4096);
    JITLLM_REQUIRE(c.headDim % 2 == 0, f.name(), ": metadata key '", p, "attention.key_length' is ", c.headDim,
                   ", which is odd");
    JITLLM_REQUIRE(c.heads * c.headDim <= kMaxDim, f.name(), ": head_count x attention.key_length is too large");
    if (f.find(p + "attention.value_length")) {
      const int64_t vl = requireInt(f, p + "attention.value_length", 1, kMaxDim);
      JITLLM_REQUIRE(vl == c.headDim, f.name(), ": metadata key '", p, "attention.value_length' is ", vl,
                     ", not attention.key_length ", c.headDim, " (unsupported)");
    }
  } else {
    JITLLM_REQUIRE(c.embedding % c.heads == 0, f.name(), ": embedding_length ", c.embedding,
                   " is not a multiple of head_count ", c.heads);
    c.headDim = c.embedding / c.heads;
  }
  c.rotaryDims =
      f.find(p + "rope.dimension_count") ? requireInt(f, p + "rope.dimension_count", 2, c.headDim) : c.headDim;
  JITLLM_REQUIRE(c.rotaryDims % 2 == 0, f.name(), ": rope.dimension_count ", c.rotaryDims, " is odd");
  c.ropeFreqBase = float(f.getFloat(p + "rope.freq_base").value_or(10000.0));
  JITLLM_REQUIRE(c.ropeFreqBase > 0, f.name(), ": rope.freq_base must be positive");
  if (auto type = f.getString(p + "rope.scaling.type")) {
    if (*type == "linear") {
      const double factor = f.getFloat(p + "rope.scaling.factor").value_or(1.0);
      JITLLM_REQUIRE(factor > 0, f.name(), ": rope.scaling.factor must be positive");
      c.ropeFreqScale = float(1.0 / factor);
    } else if (*type != "none" && *type != "llama3" &&
               !(c.arch == Architecture::kPhi3 && (*type == "longrope" || *type == "su"))) {
      // llama3 scaling is carried by the rope_freqs tensor; others (yarn) change the math.
      JITLLM_FAIL(kUnimplemented, f.name(), ": rope scaling type '", *type, "' is not supported");
    }
  }
  if (c.arch == Architecture::kGranite) readGraniteMultipliers(f, p, c);
  if (c.arch == Architecture::kGemma3) readGemma3(f, p, c);
  if (f.find(p + "rope.scaling.original_context_length")) {
    c.ropeOriginalContext = requireInt(f, p + "rope.scaling.original_context_length", 1, int64_t(1) << 24);
  }
  c.ropeAttnFactor = requireScale(f, p + "rope.scaling.attn_factor", false, 1.0f);
  c.rmsEps = float(f.getFloat(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  JITLLM_REQUIRE(c.rmsEps > 0 && c.rmsEps < 1, f.name(), ": layer_norm_rms_epsilon out of range");
  return c;
}

}  // namespace jitllm::runtime
