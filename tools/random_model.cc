#include "tools/random_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "base/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "kernels/quant/quantize.h"

namespace jitllm::tools {
namespace {

using quant::TensorType;

// splitmix64: tiny, fast, and well mixed; seeded per tensor so tensors are independent of the
// order they are written in.
class Random final {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // An approximately standard normal value: the sum of four 16-bit uniforms (Irwin-Hall),
  // centred and scaled to unit variance. One 64-bit draw per value keeps multi-GB models quick to
  // make, and weights need the right scale, not exact Gaussian tails.
  float normal() {
    const uint64_t r = next();
    const double sum = double(r & 0xffff) + double((r >> 16) & 0xffff) + double((r >> 32) & 0xffff) + double(r >> 48);
    return float((sum / 65536.0 - 2.0) * 1.7320508075688772);
  }

  // Jumps over `n` draws: what makes one tensor's rows generable in parallel, value for value.
  void skip(uint64_t n) { state_ += n * 0x9e3779b97f4a7c15ull; }

 private:
  uint64_t state_;
};

uint64_t hashName(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// K-quants need rows that are whole 256-element super-blocks; llama-quantize falls back to a
// 32-block type of similar size for other rows, and to f16 for rows not even a multiple of 32.
TensorType fitType(TensorType type, int64_t cols) {
  if (cols % quant::typeTraits(type).blockElems == 0) return type;
  if (cols % 32 != 0) return TensorType::kF16;
  switch (type) {
    case TensorType::kQ4_K:
      return TensorType::kQ5_0;
    case TensorType::kQ5_K:
      return TensorType::kQ5_1;
    case TensorType::kQ6_K:
      return TensorType::kQ8_0;
    default:
      return type;
  }
}

std::vector<float> llama3RopeFactors(int64_t headDim, double theta) {
  // Llama 3.1's published scaling: factor 32, low/high frequency factors 1 and 4, 8192 original.
  constexpr double kFactor = 32.0, kLow = 1.0, kHigh = 4.0, kOldContext = 8192.0;
  std::vector<float> out;
  for (int64_t i = 0; i < headDim; i += 2) {
    const double freq = 1.0 / std::pow(theta, double(i) / double(headDim));
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < kOldContext / kHigh) {
      out.push_back(1.0f);
    } else if (wavelen > kOldContext / kLow) {
      out.push_back(float(kFactor));
    } else {
      const double smooth = (kOldContext / wavelen - kLow) / (kHigh - kLow);
      out.push_back(float(1.0 / ((1 - smooth) / kFactor + smooth)));
    }
  }
  return out;
}

class ModelBuilder final {
 public:
  explicit ModelBuilder(const RandomModelSpec& spec) : spec_(spec) {}

  void matrix(const std::string& name, TensorType type, int64_t rows, int64_t cols, double scale) {
    type = fitType(type, cols);
    const size_t rowBytes = *quant::rowBytes(type, cols);
    std::vector<uint8_t> data(rowBytes * size_t(rows));
    // Rows in parallel: each range starts its generator where the sequential one would be, so the
    // file is the same whatever the core count (multi-GB shapes take seconds, not minutes).
    const int64_t workers =
        std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(rows / 64, 1));
    auto fill = [&](int64_t first, int64_t last) {
      Random rng(hashName(spec_.seed, name));
      rng.skip(uint64_t(first) * uint64_t(cols));
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = first; r < last; r++) {
        for (auto& v : row) v = float(rng.normal() * scale);
        quant::quantizeRow(type, row.data(), data.data() + size_t(r) * rowBytes, cols);
      }
    };
    std::vector<std::thread> threads;
    for (int64_t w = 1; w < workers; w++) threads.emplace_back(fill, rows * w / workers, rows * (w + 1) / workers);
    fill(0, rows / workers);
    for (auto& t : threads) t.join();
    writer_.addTensor(name, type, {cols, rows}, std::move(data));
  }

  void vector(const std::string& name, int64_t n, float mean, float stddev) {
    Random rng(hashName(spec_.seed, name));
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = mean + stddev * rng.normal();
    values(name, v);
  }

  void values(const std::string& name, const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    writer_.addTensor(name, TensorType::kF32, {int64_t(v.size())}, std::span<const uint8_t>(p, v.size() * 4));
  }

  gguf::GgufWriter& writer() { return writer_; }

 private:
  const RandomModelSpec& spec_;
  gguf::GgufWriter writer_;
};

// llama-quantize's rule for which layers' attn_v / ffn_down get more bits in the _M mixes: the
// first and last eighth of the layers, and every third layer in between.
bool moreBits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// Gemma 3's chat template (its tokenizer_config.json).
constexpr const char* kGemma3Template = R"JINJA({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)JINJA";

// Phi-4-mini's chat template (its tokenizer_config.json).
constexpr const char* kPhi4MiniTemplate =
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is "
    "not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + "
    "'<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor "
    "%}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}";

constexpr int32_t kControlToken = 3, kUnusedToken = 5;  // llama.cpp's token types

// The markers each family's form appends as control tokens, in id order.
constexpr std::array<const char*, 2> kGemmaMarkers = {"<start_of_turn>", "<end_of_turn>"};
// Phi-4-mini's, in its order: <|endoftext|> (BOS and EOS) first, <|end|> (EOT) third.
constexpr std::array<const char*, 11> kPhi4Markers = {
    "<|endoftext|>", "<|assistant|>", "<|end|>",        "<|user|>",          "<|system|>", "<|tool|>",
    "<|/tool|>",     "<|tool_call|>", "<|/tool_call|>", "<|tool_response|>", "<|tag|>"};
constexpr size_t kPhi4EndOfText = 0, kPhi4EndOfTurn = 2;

// A vocabulary file's pieces with a family's markers appended as control tokens and unused
// pieces padding it to `size` (random_model.h says why the shapes need this).
struct FormedVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;  // empty when the file has none (BPE)
  std::vector<int32_t> types;

  int32_t firstMarker = 0;  // the id of markers[0]

  FormedVocab(const gguf::GgufFile& vocab, std::span<const char* const> markers) {
    tokens = *vocab.getStringArray("tokenizer.ggml.tokens");
    scores = vocab.getF32Array("tokenizer.ggml.scores").value_or(std::vector<float>{});
    types = *vocab.getI32Array("tokenizer.ggml.token_type");
    firstMarker = int32_t(tokens.size());
    for (const char* marker : markers) add(marker, kControlToken);
  }
  int32_t add(const std::string& piece, int32_t type) {
    tokens.push_back(piece);
    if (!scores.empty()) scores.push_back(0.0f);
    types.push_back(type);
    return int32_t(tokens.size() - 1);
  }
  void padTo(int64_t size, const std::string& prefix, const std::string& suffix) {
    for (int64_t i = 0; int64_t(tokens.size()) < size; i++) add(prefix + std::to_string(i) + suffix, kUnusedToken);
  }
  // The file's tokenizer keys with these pieces in place of its own.
  void write(const gguf::GgufFile& vocab, gguf::GgufWriter& w) const {
    for (const auto& [key, value] : vocab.metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
    }
    w.set("tokenizer.ggml.tokens", gguf::Value::stringArray(tokens));
    if (!scores.empty()) w.set("tokenizer.ggml.scores", gguf::Value::f32Array(scores));
    w.set("tokenizer.ggml.token_type", gguf::Value::i32Array(types));
  }
};

// Which vocabulary a shape writes: its file's as it is, or the file's pieces in a family's form.
enum class TokenizerForm { kAsFile, kGemma, kPhi4 };

TokenizerForm tokenizerForm(const ModelShape& s) {
  if (s.arch == "gemma3") return TokenizerForm::kGemma;
  if (s.arch == "phi3" && s.vocabFile.find("llama-bpe") != std::string::npos) return TokenizerForm::kPhi4;
  return TokenizerForm::kAsFile;
}

// How many markers the form appends to the file's pieces.
int64_t formMarkers(TokenizerForm form) {
  switch (form) {
    case TokenizerForm::kGemma:
      return int64_t(kGemmaMarkers.size());
    case TokenizerForm::kPhi4:
      return int64_t(kPhi4Markers.size());
    case TokenizerForm::kAsFile:
      break;
  }
  return 0;
}

// The tokenizer keys of `vocab` (llama-spm's) in gemma's form: see random_model.h.
void writeGemmaTokenizer(const gguf::GgufFile& vocab, int64_t size, gguf::GgufWriter& w) {
  FormedVocab v(vocab, kGemmaMarkers);
  v.padTo(size, "<unused", ">");
  v.write(vocab, w);
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(false));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
  w.set("tokenizer.chat_template", gguf::Value::string(kGemma3Template));
}

// The tokenizer keys of `vocab` (llama-bpe's) in Phi-4-mini's form: see random_model.h.
void writePhi4Tokenizer(const gguf::GgufFile& vocab, int64_t size, gguf::GgufWriter& w) {
  FormedVocab v(vocab, kPhi4Markers);
  const int32_t endOfText = v.firstMarker + int32_t(kPhi4EndOfText);
  const int32_t endOfTurn = v.firstMarker + int32_t(kPhi4EndOfTurn);
  v.padTo(size, "<|dummy_", "|>");
  v.write(vocab, w);
  w.set("tokenizer.ggml.pre", gguf::Value::string("gpt-4o"));
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id"}) {
    w.set(key, gguf::Value::u32(uint32_t(endOfText)));
  }
  // Named, not left to detection: llama-bpe's <|eot_id|> is a candidate too, and llama.cpp takes
  // whichever its hash map lists first.
  w.set("tokenizer.ggml.eot_token_id", gguf::Value::u32(uint32_t(endOfTurn)));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));
  w.set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(false));
  w.set("tokenizer.chat_template", gguf::Value::string(kPhi4MiniTemplate));
}

}  // namespace

const std::vector<ModelShape>& knownShapes() {
  static const std::vector<ModelShape> shapes = {
      // name, arch, embd, layers, heads, kv, ff, vocab, theta, llama3, tied, ctx, eps, head dim
      {"micro", "llama", 256, 2, 4, 2, 512, "models/stories260K.gguf", 10000.0f, false, false, 2048, 1e-5f, 0},
      {"tiny", "llama", 256, 4, 8, 4, 688, "vocab/ggml-vocab-llama-spm.gguf", 10000.0f, false, false, 2048, 1e-5f, 0},
      {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, "vocab/ggml-vocab-llama-bpe.gguf", 500000.0f, true, true, 131072,
       1e-5f, 0},
      {"llama-3.2-3b", "llama", 3072, 28, 24, 8, 8192, "vocab/ggml-vocab-llama-bpe.gguf", 500000.0f, true, true, 131072,
       1e-5f, 0},
      {"llama-3.1-8b", "llama", 4096, 32, 32, 8, 14336, "vocab/ggml-vocab-llama-bpe.gguf", 500000.0f, true, false,
       131072, 1e-5f, 0},
      {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, "vocab/ggml-vocab-qwen2.gguf", 1000000.0f, false, true, 32768,
       1e-6f, 0},
      {"qwen3-micro", "qwen3", 256, 4, 4, 2, 512, "vocab/ggml-vocab-qwen2.gguf", 1000000.0f, false, true, 40960, 1e-6f,
       128},
      {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, "vocab/ggml-vocab-qwen2.gguf", 1000000.0f, false, true, 40960,
       1e-6f, 128},
      {"qwen3-4b", "qwen3", 2560, 36, 32, 8, 9728, "vocab/ggml-vocab-qwen2.gguf", 1000000.0f, false, true, 40960, 1e-6f,
       128},
      {"granite-micro", "granite", 256, 4, 4, 2, 512, "vocab/ggml-vocab-refact.gguf", 10000000.0f, false, true, 131072,
       1e-5f, 0},
      {"granite-3.3-2b", "granite", 2048, 40, 32, 8, 8192, "vocab/ggml-vocab-refact.gguf", 10000000.0f, false, true,
       131072, 1e-5f, 0},
      // phi3: contexts past the original 4096 tokens, so the long LongRoPE factors are in use.
      {"phi3-micro", "phi3", 256, 4, 4, 4, 512, "vocab/ggml-vocab-phi-3.gguf", 10000.0f, false, false, 8192, 1e-5f, 0},
      {"phi-3.5-mini", "phi3", 3072, 32, 32, 32, 8192, "vocab/ggml-vocab-phi-3.gguf", 10000.0f, false, false, 131072,
       1e-5f, 0},
      // Phi-4-mini: llama-bpe's pieces in Phi-4's form (random_model.h), grouped-query heads, a tied
      // output and rope over 3/4 of each head.
      {"phi4-micro", "phi3", 256, 4, 4, 2, 512, "vocab/ggml-vocab-llama-bpe.gguf", 10000.0f, false, true, 8192, 1e-5f,
       0, 0, 0, 0, 48},
      {"phi-4-mini", "phi3", 3072, 32, 24, 8, 8192, "vocab/ggml-vocab-llama-bpe.gguf", 10000.0f, false, true, 131072,
       1e-5f, 0, 0, 0, 200064, 96},
      // gemma3: llama-spm's pieces in gemma's form (random_model.h); window, heads and context of
      // Gemma 3 1B and 4B (4B: linear rope scaling 8 on its global layers).
      {"gemma3-micro", "gemma3", 256, 6, 4, 2, 512, "vocab/ggml-vocab-llama-spm.gguf", 1000000.0f, false, true, 32768,
       1e-6f, 64, 24, 0, 0},
      {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, "vocab/ggml-vocab-llama-spm.gguf", 1000000.0f, false, true, 32768,
       1e-6f, 256, 512, 0, 262144},
      {"gemma3-4b", "gemma3", 2560, 34, 8, 4, 10240, "vocab/ggml-vocab-llama-spm.gguf", 1000000.0f, false, true, 131072,
       1e-6f, 256, 1024, 8.0f, 262144},
  };
  return shapes;
}

std::optional<ModelShape> findShape(const std::string& name) {
  for (const auto& s : knownShapes()) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

std::optional<WeightMix> findMix(const std::string& name) {
  // general.file_type values are llama_ftype's.
  static const std::vector<WeightMix> mixes = {
      {"f32", TensorType::kF32, TensorType::kF32, TensorType::kF32, 0},
      {"f16", TensorType::kF16, TensorType::kF16, TensorType::kF16, 1},
      {"bf16", TensorType::kBF16, TensorType::kBF16, TensorType::kBF16, 32},
      {"q4_0", TensorType::kQ4_0, TensorType::kQ4_0, TensorType::kQ6_K, 2},
      {"q4_1", TensorType::kQ4_1, TensorType::kQ4_1, TensorType::kQ6_K, 3},
      {"q8_0", TensorType::kQ8_0, TensorType::kQ8_0, TensorType::kQ8_0, 7},
      {"q5_0", TensorType::kQ5_0, TensorType::kQ5_0, TensorType::kQ6_K, 8},
      {"q5_1", TensorType::kQ5_1, TensorType::kQ5_1, TensorType::kQ6_K, 9},
      {"q4_k_s", TensorType::kQ4_K, TensorType::kQ4_K, TensorType::kQ6_K, 14},
      {"q4_k_m", TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ6_K, 15},
      {"q5_k_s", TensorType::kQ5_K, TensorType::kQ5_K, TensorType::kQ6_K, 16},
      {"q5_k_m", TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kQ6_K, 17},
      {"q6_k", TensorType::kQ6_K, TensorType::kQ6_K, TensorType::kQ6_K, 18},
  };
  for (const auto& m : mixes) {
    if (m.name == name) return m;
  }
  return std::nullopt;
}

void writeRandomModel(const RandomModelSpec& spec, const std::string& path) {
  const ModelShape& s = spec.shape;
  const WeightMix& mix = spec.mix;
  // The shared folder's vocabularies, else the repository's own (tests/goldens/vocab: refact).
  std::string vocabPath = spec.sharedDir + "/" + s.vocabFile;
  if (!std::filesystem::exists(vocabPath) &&
      std::filesystem::exists(std::string(JITLLM_REPO_GOLDENS_DIR) + "/" + s.vocabFile)) {
    vocabPath = std::string(JITLLM_REPO_GOLDENS_DIR) + "/" + s.vocabFile;
  }
  auto vocab = gguf::GgufFile::open(vocabPath);
  const gguf::Value* tokens = vocab->find("tokenizer.ggml.tokens");
  JITLLM_REQUIRE(tokens && tokens->asArray(), vocab->name(), ": no tokenizer.ggml.tokens");
  const bool gemma = s.arch == "gemma3";
  const TokenizerForm form = tokenizerForm(s);
  const int64_t fileVocab = int64_t(tokens->asArray()->size()) + formMarkers(form);
  const int64_t nVocab = std::max(fileVocab, s.vocabSize);
  const int64_t headDim = s.headDim > 0 ? s.headDim : s.embedding / s.heads;

  ModelBuilder b(spec);
  gguf::GgufWriter& w = b.writer();
  const std::string a = s.arch + ".";
  w.set("general.architecture", gguf::Value::string(s.arch));
  w.set("general.name", gguf::Value::string("random-" + s.name));
  w.set(a + "context_length", gguf::Value::u32(uint32_t(s.contextLength)));
  w.set(a + "embedding_length", gguf::Value::u32(uint32_t(s.embedding)));
  w.set(a + "block_count", gguf::Value::u32(uint32_t(s.layers)));
  w.set(a + "feed_forward_length", gguf::Value::u32(uint32_t(s.feedForward)));
  w.set(a + "attention.head_count", gguf::Value::u32(uint32_t(s.heads)));
  w.set(a + "attention.head_count_kv", gguf::Value::u32(uint32_t(s.kvHeads)));
  const int64_t rotaryDims = s.rotaryDims > 0 ? s.rotaryDims : headDim;
  w.set(a + "rope.dimension_count", gguf::Value::u32(uint32_t(rotaryDims)));
  if (s.headDim > 0) {
    w.set(a + "attention.key_length", gguf::Value::u32(uint32_t(headDim)));
    w.set(a + "attention.value_length", gguf::Value::u32(uint32_t(headDim)));
  }
  w.set(a + "rope.freq_base", gguf::Value::f32(s.ropeFreqBase));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(s.rmsEps));
  w.set("general.file_type", gguf::Value::u32(mix.fileType));
  if (s.arch == "phi3") {
    // Phi-3.5-mini's LongRoPE: the factors are for 4096 tokens, and rope scales q and k by
    // sqrt(1 + ln(scale) / ln(4096)) for its 32x longer context.
    w.set(a + "rope.scaling.original_context_length", gguf::Value::u32(4096));
    w.set(a + "rope.scaling.attn_factor", gguf::Value::f32(1.1902381f));
  }
  if (s.arch == "granite") {
    // Granite 3.3's multipliers (its config.json: embedding, residual and attention multipliers,
    // logits scaling).
    w.set(a + "embedding_scale", gguf::Value::f32(12.0f));
    w.set(a + "residual_scale", gguf::Value::f32(0.22f));
    w.set(a + "attention.scale", gguf::Value::f32(0.015625f));
    w.set(a + "logit_scale", gguf::Value::f32(8.0f));
  }
  if (s.slidingWindow > 0) {
    w.set(a + "attention.sliding_window", gguf::Value::u32(uint32_t(s.slidingWindow)));
    w.set(a + "rope.freq_base_swa", gguf::Value::f32(10000.0f));
  }
  if (s.ropeLinearFactor > 0) {
    w.set(a + "rope.scaling.type", gguf::Value::string("linear"));
    w.set(a + "rope.scaling.factor", gguf::Value::f32(s.ropeLinearFactor));
  }
  if (form == TokenizerForm::kGemma) {
    writeGemmaTokenizer(*vocab, nVocab, w);
  } else if (form == TokenizerForm::kPhi4) {
    writePhi4Tokenizer(*vocab, nVocab, w);
  } else {
    for (const auto& [key, value] : vocab->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
    }
  }

  if (spec.vocabOnly) {
    w.writeFile(path);
    return;
  }
  b.matrix("token_embd.weight", s.tiedEmbeddings ? mix.output : mix.base, nVocab, s.embedding, 1.0);
  b.vector("output_norm.weight", s.embedding, 1.0f, 0.1f);
  if (!s.tiedEmbeddings) b.matrix("output.weight", mix.output, nVocab, s.embedding, 1.0 / std::sqrt(s.embedding));
  if (s.llama3Rope) b.values("rope_freqs.weight", llama3RopeFactors(rotaryDims, s.ropeFreqBase));
  if (s.arch == "phi3") {
    // Divisors of each rotary frequency: near 1 (short), up to tens (long), as Phi-3.5's are.
    std::vector<float> shortFactors(size_t(rotaryDims / 2)), longFactors(size_t(rotaryDims / 2));
    for (size_t i = 0; i < shortFactors.size(); i++) {
      const float x = float(i) / float(shortFactors.size());
      shortFactors[i] = 1.0f + 0.1f * x;
      longFactors[i] = 1.0f + 40.0f * x * x;
    }
    b.values("rope_factors_short.weight", shortFactors);
    b.values("rope_factors_long.weight", longFactors);
  }
  const int64_t qDim = s.heads * headDim, kvDim = s.kvHeads * headDim;
  const bool qwen = s.arch == "qwen2";
  for (int64_t i = 0; i < s.layers; i++) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const TensorType more = moreBits(i, s.layers) ? mix.more : mix.base;
    const double inEmb = 1.0 / std::sqrt(double(s.embedding));
    b.vector(p + "attn_norm.weight", s.embedding, 1.0f, 0.1f);
    if (s.arch == "phi3") {
      b.matrix(p + "attn_qkv.weight", mix.base, qDim + 2 * kvDim, s.embedding, inEmb);  // q, k, v rows
    } else {
      b.matrix(p + "attn_q.weight", mix.base, qDim, s.embedding, inEmb);
      b.matrix(p + "attn_k.weight", mix.base, kvDim, s.embedding, inEmb);
      b.matrix(p + "attn_v.weight", more, kvDim, s.embedding, inEmb);
    }
    if (qwen) {
      b.vector(p + "attn_q.bias", qDim, 0.0f, 0.1f);
      b.vector(p + "attn_k.bias", kvDim, 0.0f, 0.1f);
      b.vector(p + "attn_v.bias", kvDim, 0.0f, 0.1f);
    }
    if (s.arch == "qwen3" || gemma) {
      b.vector(p + "attn_q_norm.weight", headDim, 1.0f, 0.1f);
      b.vector(p + "attn_k_norm.weight", headDim, 1.0f, 0.1f);
    }
    b.matrix(p + "attn_output.weight", mix.base, s.embedding, qDim, 1.0 / std::sqrt(double(qDim)));
    if (gemma) b.vector(p + "post_attention_norm.weight", s.embedding, 1.0f, 0.1f);
    b.vector(p + "ffn_norm.weight", s.embedding, 1.0f, 0.1f);
    if (s.arch == "phi3") {
      b.matrix(p + "ffn_up.weight", mix.base, 2 * s.feedForward, s.embedding, inEmb);  // gate rows, then up
    } else {
      b.matrix(p + "ffn_gate.weight", mix.base, s.feedForward, s.embedding, inEmb);
      b.matrix(p + "ffn_up.weight", mix.base, s.feedForward, s.embedding, inEmb);
    }
    b.matrix(p + "ffn_down.weight", more, s.embedding, s.feedForward, 1.0 / std::sqrt(double(s.feedForward)));
    if (gemma) b.vector(p + "post_ffw_norm.weight", s.embedding, 1.0f, 0.1f);
  }
  w.writeFile(path);
}

}  // namespace jitllm::tools
