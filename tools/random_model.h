// Random-weight GGUF models in the shapes of real ones, written directly in any weight type.
//
// Speed and memory depend on shapes, not on weight values, so these stand in for real models in
// benchmarks, and tests use them to check the runtime against llama.cpp without shipping
// gigabytes. The weights come from our own deterministic generator (splitmix64 + Box-Muller), so
// the same spec always gives the same bytes on every machine; the tokenizer is copied from a
// vocab-only GGUF. Shapes and weight statistics follow ../shared/peer/mkmodel.py.
//
// Thread-safety: pure functions (writeRandomModel uses the calling thread only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/quant/tensor_type.h"

namespace jitllm::tools {

struct ModelShape {
  std::string name;  // "micro", "tiny", "llama-3.2-1b", ...
  std::string arch;  // "llama", "qwen2" or "qwen3"
  int64_t embedding, layers, heads, kvHeads, feedForward;
  std::string vocabFile;  // under the shared dir: "vocab/ggml-vocab-llama-bpe.gguf"
  float ropeFreqBase;
  bool llama3Rope;
  bool tiedEmbeddings;
  int64_t contextLength;
  float rmsEps;
  int64_t headDim;             // 0: embedding / heads; else written as attention.key_length (qwen3)
  int64_t slidingWindow = 0;   // gemma3: attention.sliding_window (every 6th layer global)
  float ropeLinearFactor = 0;  // rope.scaling.type linear with this factor (0: none)
  int64_t vocabSize = 0;       // the vocabulary padded to this many tokens (0: the vocab file's)
  int64_t rotaryDims = 0;      // rope.dimension_count: the leading dims of each head rope turns (0: all)
};

// micro, tiny, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen2.5-0.5b, qwen3-micro (a 4-layer
// qwen3 with its real vocab and 128-wide heads, for tests), qwen3-0.6b, qwen3-4b, granite-micro (a
// 4-layer granite with Granite 3.3's multipliers and tokenizer), granite-3.3-2b, phi3-micro (fused
// matrices, LongRoPE, an 8192-token context past the original 4096), phi-3.5-mini, phi4-micro (as
// phi3-micro with grouped-query heads, a tied output, rope over 48 of 64 dims and Phi-4's
// tokenizer form), phi-4-mini, gemma3-micro (6 layers, one global, a 24-token sliding window),
// gemma3-1b, gemma3-4b.
//
// Gemma's own tokenizer (SentencePiece, 262144 pieces) is not among the vocab files llama.cpp
// ships, so the gemma3 shapes carry llama-spm's pieces in gemma's form: no space prefix, gemma's
// turn markers <start_of_turn> and <end_of_turn> as control tokens, unused pieces padding the
// vocabulary to gemma's 262144 tokens (the micro shape keeps 32002), and Gemma 3's chat template.
// Phi-4-mini's (o200k, 200064 tokens) is not there either: its shapes carry llama-bpe's pieces with
// the gpt-4o pre-tokenizer, Phi-4's markers (<|endoftext|> as BOS and EOS, <|user|>, <|end|>, the
// tool markers) as control tokens, <|dummy_N|> padding to 200064 (the micro shape keeps 128267),
// no BOS added, and Phi-4-mini's chat template.
const std::vector<ModelShape>& knownShapes();
std::optional<ModelShape> findShape(const std::string& name);

// A file type as llama-quantize names it: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s
// (all q4_K), q4_k_m, q5_k_s, q5_k_m, q6_k. The _m mixes give attn_v and ffn_down of some layers
// and the output matrix q6_K, as llama-quantize does.
struct WeightMix {
  std::string name;
  quant::TensorType base;
  quant::TensorType more;    // attn_v / ffn_down of the layers that get more bits
  quant::TensorType output;  // output.weight (or the tied embedding)
  uint32_t fileType;         // general.file_type (llama_ftype)
};
std::optional<WeightMix> findMix(const std::string& name);

struct RandomModelSpec {
  ModelShape shape;
  WeightMix mix;
  uint64_t seed = 0;
  std::string sharedDir;   // where vocabFile is found
  bool vocabOnly = false;  // the metadata only (a vocabulary file, as llama.cpp's ggml-vocab-*.gguf)
};

// Writes the model to `path`; Error(FAILED) naming the file on I/O problems.
void writeRandomModel(const RandomModelSpec& spec, const std::string& path);

}  // namespace jitllm::tools
