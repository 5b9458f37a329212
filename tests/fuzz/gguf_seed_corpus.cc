// Writes the committed seed corpus of gguf_fuzz (tests/fuzz/corpus/gguf) and its dictionary
// (tests/fuzz/gguf.dict):
//
//   build/fuzz/bin/gguf_seed_corpus tests/fuzz/corpus/gguf tests/fuzz/gguf.dict
//
// Seeds are small, valid files that between them reach every part of the reader and of what reads
// a parsed file: versions 2 and 3, several alignments, every value type, nested arrays, tensors of
// every type ggml defines, a tiny llama and a tiny qwen2 that load as models and as tokenizers, and
// two truncated files. The output is deterministic, so regenerating changes nothing unless this
// file changed. Each seed is checked by reading it back before it is written.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/model_tensors.h"
#include "kernels/quant/tensor_type.h"
#if JITLLM_FUZZ_TOKENIZER
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_from_gguf.h"
#endif

namespace {

using jitllm::gguf::GgufFile;
using jitllm::gguf::GgufWriter;
using jitllm::gguf::Value;
using jitllm::gguf::ValueType;
using jitllm::quant::TensorType;

// Seeds stay far below libFuzzer's comfortable input sizes; every byte is mutated at some point.
static constexpr size_t kMaxSeedBytes = 64 * 1024;

// Deterministic filler for tensor bytes (quant blocks need no meaning; the reader never decodes).
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = uint8_t(x >> 24);
  }
  return out;
}

// Small finite floats, so float tensors of the model seeds look like weights.
std::vector<uint8_t> floats(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n * 4);
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    const float v = (float(x >> 8) / float(1 << 24) - 0.5f) * 0.25f;
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

// The bytes a tensor of this type and shape takes.
size_t tensorBytes(TensorType type, const std::vector<int64_t>& dims) {
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); i++) rows *= dims[i];
  return *jitllm::quant::rowBytes(type, dims[0]) * size_t(rows);
}

void addFilled(GgufWriter& w, const std::string& name, TensorType type, std::vector<int64_t> dims, uint32_t seed) {
  const size_t n = tensorBytes(type, dims);
  w.addTensor(name, type, std::move(dims), type == TensorType::kF32 ? floats(n / 4, seed) : pattern(n, seed));
}

void setEveryValueType(GgufWriter& w) {
  w.set("general.architecture", Value::string("fuzz"));
  w.set("general.name", Value::string(""));
  w.set("scalar.u8", Value::u8(255));
  w.set("scalar.i8", Value::i8(-128));
  w.set("scalar.u16", Value::u16(65535));
  w.set("scalar.i16", Value::i16(-32768));
  w.set("scalar.u32", Value::u32(4294967295u));
  w.set("scalar.i32", Value::i32(-2147483647 - 1));
  w.set("scalar.u64", Value::u64(18446744073709551615ull));
  w.set("scalar.i64", Value::i64(-9223372036854775807ll - 1));
  w.set("scalar.f32", Value::f32(-1.5e-38f));
  w.set("scalar.f64", Value::f64(1e308));
  w.set("scalar.bool.true", Value::boolean(true));
  w.set("scalar.bool.false", Value::boolean(false));
  w.set("scalar.string", Value::string("h\xc3\xa9llo \xe2\x96\x81 \xf0\x9f\x98\x80"));
  w.set("array.u8", Value::array(ValueType::kUint8, {Value::u8(0), Value::u8(1), Value::u8(255)}));
  w.set("array.i8", Value::array(ValueType::kInt8, {Value::i8(-1), Value::i8(127)}));
  w.set("array.u16", Value::array(ValueType::kUint16, {Value::u16(1), Value::u16(65535)}));
  w.set("array.i16", Value::array(ValueType::kInt16, {Value::i16(-2), Value::i16(300)}));
  w.set("array.u32", Value::array(ValueType::kUint32, {Value::u32(4294967295u), Value::u32(7)}));
  w.set("array.i32", Value::i32Array({-1, 0, 2147483647}));
  w.set("array.u64", Value::array(ValueType::kUint64, {Value::u64(1ull << 63), Value::u64(3)}));
  w.set("array.i64", Value::array(ValueType::kInt64, {Value::i64(-5), Value::i64(1ll << 40)}));
  w.set("array.f32", Value::f32Array({0.5f, -0.0f, 3.25f}));
  w.set("array.f64", Value::array(ValueType::kFloat64, {Value::f64(1e-300), Value::f64(-2.5)}));
  w.set("array.bool", Value::array(ValueType::kBool, {Value::boolean(true), Value::boolean(false)}));
  w.set("array.string", Value::stringArray({"", "a", "\xe2\x96\x81world"}));
  w.set("array.empty", Value::array(ValueType::kUint32, {}));
  w.set("array.empty_strings", Value::stringArray({}));
  w.set("array.nested.i32", Value::array(ValueType::kArray, {Value::i32Array({1, 2}), Value::i32Array({})}));
  w.set("array.nested.string",
        Value::array(ValueType::kArray, {Value::stringArray({"x", "yz"}), Value::stringArray({"w"})}));
  w.set("array.nested.three",
        Value::array(ValueType::kArray,
                     {Value::array(ValueType::kArray, {Value::f32Array({1.0f}), Value::array(ValueType::kBool, {})})}));
}

void addSmallTensors(GgufWriter& w) {
  addFilled(w, "vector.f32", TensorType::kF32, {5}, 1);
  addFilled(w, "matrix.f16", TensorType::kF16, {3, 2}, 2);
  addFilled(w, "block.q8_0", TensorType::kQ8_0, {32}, 3);
}

// Every tensor type ggml defines, in one to four dimensions.
void addEveryTensorType(GgufWriter& w) {
  int index = 0;
  for (uint32_t raw = 0; raw < 64; raw++) {
    const auto traits = jitllm::quant::typeTraits(raw);
    if (!traits) continue;
    std::vector<int64_t> dims = {traits->blockElems};
    if (traits->blockElems == 1) dims[0] = 3;
    for (int extra = 0; extra < index % 4; extra++) dims.push_back(extra + 1);
    addFilled(w, "t." + std::string(traits->name), TensorType(raw), dims, raw);
    index++;
  }
}

std::vector<std::string> spmTokens() {
  return {"<unk>",
          "<s>",
          "</s>",
          "<0x0A>",
          "<0xE2>",
          "\xe2\x96\x81",
          "\xe2\x96\x81H",
          "e",
          "l",
          "o",
          "\xe2\x96\x81Hello",
          "\xe2\x96\x81w",
          "r",
          "d",
          ",",
          "!"};
}

// A two-block llama whose every tensor is what ModelTensors::find asks for, with a SentencePiece
// vocabulary, grouped-query attention, linear rope scaling and llama3's rope_freqs tensor.
GgufWriter tinyLlama() {
  GgufWriter w(3, 32);
  constexpr int64_t kEmbd = 8, kHeads = 2, kKvHeads = 1, kFf = 16, kLayers = 2;
  const std::vector<std::string> tokens = spmTokens();
  const int64_t vocab = int64_t(tokens.size());
  constexpr int64_t headDim = kEmbd / kHeads, kvDim = kKvHeads * headDim;
  w.set("general.architecture", Value::string("llama"));
  w.set("general.name", Value::string("tiny llama"));
  w.set("llama.context_length", Value::u32(64));
  w.set("llama.embedding_length", Value::u32(kEmbd));
  w.set("llama.block_count", Value::u32(kLayers));
  w.set("llama.feed_forward_length", Value::u32(kFf));
  w.set("llama.attention.head_count", Value::u32(kHeads));
  w.set("llama.attention.head_count_kv", Value::u32(kKvHeads));
  w.set("llama.attention.key_length", Value::u32(headDim));
  w.set("llama.rope.dimension_count", Value::u32(headDim));
  w.set("llama.rope.freq_base", Value::f32(500000.0f));
  w.set("llama.rope.scaling.type", Value::string("linear"));
  w.set("llama.rope.scaling.factor", Value::f32(2.0f));
  w.set("llama.attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.tokens", Value::stringArray(tokens));
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (size_t i = 0; i < tokens.size(); i++) {
    scores.push_back(-float(i));
    types.push_back(i == 0 ? 2 : i < 3 ? 3 : i < 5 ? 6 : 1);  // unknown, control, byte, normal
  }
  w.set("tokenizer.ggml.scores", Value::f32Array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32Array(types));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
  w.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
  w.set("tokenizer.ggml.padding_token_id", Value::u32(4294967295u));  // "none", as converters write it
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));
  uint32_t seed = 100;
  addFilled(w, "token_embd.weight", TensorType::kF32, {kEmbd, vocab}, seed++);
  addFilled(w, "output_norm.weight", TensorType::kF32, {kEmbd}, seed++);
  addFilled(w, "output.weight", TensorType::kF16, {kEmbd, vocab}, seed++);
  addFilled(w, "rope_freqs.weight", TensorType::kF32, {headDim / 2}, seed++);
  for (int64_t i = 0; i < kLayers; i++) {
    const std::string p = "blk." + std::to_string(i) + ".";
    addFilled(w, p + "attn_norm.weight", TensorType::kF32, {kEmbd}, seed++);
    addFilled(w, p + "attn_q.weight", TensorType::kF32, {kEmbd, kEmbd}, seed++);
    addFilled(w, p + "attn_k.weight", TensorType::kF16, {kEmbd, kvDim}, seed++);
    addFilled(w, p + "attn_v.weight", TensorType::kBF16, {kEmbd, kvDim}, seed++);
    addFilled(w, p + "attn_output.weight", TensorType::kF32, {kEmbd, kEmbd}, seed++);
    addFilled(w, p + "ffn_norm.weight", TensorType::kF32, {kEmbd}, seed++);
    addFilled(w, p + "ffn_gate.weight", TensorType::kF32, {kEmbd, kFf}, seed++);
    addFilled(w, p + "ffn_up.weight", TensorType::kF32, {kEmbd, kFf}, seed++);
    addFilled(w, p + "ffn_down.weight", TensorType::kF32, {kFf, kEmbd}, seed++);
  }
  return w;
}

// A one-block qwen2 (QKV biases, tied output) in q8_0 and q4_0, with a byte-level BPE vocabulary.
GgufWriter tinyQwen2() {
  GgufWriter w(3, 64);
  constexpr int64_t kEmbd = 32, kHeads = 4, kKvHeads = 2, kFf = 64;
  constexpr int64_t headDim = kEmbd / kHeads, kvDim = kKvHeads * headDim;
  const std::vector<std::string> tokens = {
      "!",          ",",  "H",  "e",   "l",         "o",  "\xc4\xa0",      "w",
      "r",          "d",  "ll", "llo", "\xc4\xa0w", "He", "<|endoftext|>", "<|im_start|>",
      "<|im_end|>", "123"};
  const int64_t vocab = int64_t(tokens.size());
  w.set("general.architecture", Value::string("qwen2"));
  w.set("qwen2.context_length", Value::u32(128));
  w.set("qwen2.embedding_length", Value::u32(kEmbd));
  w.set("qwen2.block_count", Value::u32(1));
  w.set("qwen2.feed_forward_length", Value::u32(kFf));
  w.set("qwen2.attention.head_count", Value::u32(kHeads));
  w.set("qwen2.attention.head_count_kv", Value::u32(kKvHeads));
  w.set("qwen2.rope.freq_base", Value::f32(1000000.0f));
  w.set("qwen2.attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("qwen2"));
  w.set("tokenizer.ggml.tokens", Value::stringArray(tokens));
  std::vector<int32_t> types(tokens.size(), 1);
  types[14] = types[15] = types[16] = 3;
  w.set("tokenizer.ggml.token_type", Value::i32Array(types));
  w.set("tokenizer.ggml.merges", Value::stringArray({"l l", "ll o", "\xc4\xa0 w", "H e"}));
  w.set("tokenizer.ggml.bos_token_id", Value::i32(14));
  w.set("tokenizer.ggml.eos_token_id", Value::i32(16));
  w.set("tokenizer.ggml.padding_token_id", Value::i32(14));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  uint32_t seed = 200;
  addFilled(w, "token_embd.weight", TensorType::kQ8_0, {kEmbd, vocab}, seed++);
  addFilled(w, "output_norm.weight", TensorType::kF32, {kEmbd}, seed++);
  const std::string p = "blk.0.";
  addFilled(w, p + "attn_norm.weight", TensorType::kF32, {kEmbd}, seed++);
  addFilled(w, p + "attn_q.weight", TensorType::kQ8_0, {kEmbd, kEmbd}, seed++);
  addFilled(w, p + "attn_k.weight", TensorType::kQ4_0, {kEmbd, kvDim}, seed++);
  addFilled(w, p + "attn_v.weight", TensorType::kQ4_1, {kEmbd, kvDim}, seed++);
  addFilled(w, p + "attn_q.bias", TensorType::kF32, {kEmbd}, seed++);
  addFilled(w, p + "attn_k.bias", TensorType::kF32, {kvDim}, seed++);
  addFilled(w, p + "attn_v.bias", TensorType::kF32, {kvDim}, seed++);
  addFilled(w, p + "attn_output.weight", TensorType::kQ5_0, {kEmbd, kEmbd}, seed++);
  addFilled(w, p + "ffn_norm.weight", TensorType::kF32, {kEmbd}, seed++);
  addFilled(w, p + "ffn_gate.weight", TensorType::kQ8_0, {kEmbd, kFf}, seed++);
  addFilled(w, p + "ffn_up.weight", TensorType::kQ5_1, {kEmbd, kFf}, seed++);
  addFilled(w, p + "ffn_down.weight", TensorType::kQ8_0, {kFf, kEmbd}, seed++);
  return w;
}

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
  bool valid = true;   // the reader accepts it
  bool model = false;  // ModelConfig and ModelTensors accept it
  bool vocab = false;  // vocabFromGguf and Tokenizer accept it
};

std::vector<Seed> seeds() {
  std::vector<Seed> out;
  auto add = [&](std::string name, const GgufWriter& w) { out.push_back({std::move(name), w.serialize()}); };
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w(version);
    setEveryValueType(w);
    add("v" + std::to_string(version) + "_every_value_type.gguf", w);
  }
  add("v3_empty.gguf", GgufWriter(3));
  for (auto [version, alignment] : {std::pair{3u, 1u}, {3u, 8u}, {2u, 32u}, {3u, 64u}, {2u, 256u}}) {
    GgufWriter w(version, alignment);
    w.set("general.architecture", Value::string("fuzz"));
    addSmallTensors(w);
    add("v" + std::to_string(version) + "_align_" + std::to_string(alignment) + "_tensors.gguf", w);
  }
  {
    GgufWriter w(3, 16);
    addEveryTensorType(w);
    add("v3_every_tensor_type.gguf", w);
  }
  add("v3_llama_tiny.gguf", tinyLlama());
  out.back().model = out.back().vocab = true;
  add("v3_qwen2_tiny.gguf", tinyQwen2());
  out.back().model = out.back().vocab = true;
  {
    std::vector<uint8_t> bytes = tinyLlama().serialize();
    bytes.resize(bytes.size() - 100);  // the last tensors run past the end
    out.push_back({"truncated_tensor_data.gguf", std::move(bytes), false});
  }
  {
    GgufWriter w(3);
    setEveryValueType(w);
    std::vector<uint8_t> bytes = w.serialize();
    bytes.resize(bytes.size() * 3 / 5);  // stops inside the metadata
    out.push_back({"truncated_metadata.gguf", std::move(bytes), false});
  }
  return out;
}

// Reads a seed back through everything gguf_fuzz exercises; says what it reached.
bool check(const Seed& seed) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::fromBytes(seed.bytes, seed.name);
  } catch (const jitllm::Error& e) {
    if (seed.valid) std::fprintf(stderr, "%s: refused: %s\n", seed.name.c_str(), e.what());
    return !seed.valid;
  }
  if (!seed.valid) {
    std::fprintf(stderr, "%s: accepted, but it is meant to be broken\n", seed.name.c_str());
    return false;
  }
  bool ok = true;
  if (seed.model) {
    try {
      auto config = jitllm::runtime::ModelConfig::fromGguf(*f);
      jitllm::runtime::ModelTensors::find(*f, config);
    } catch (const jitllm::Error& e) {
      std::fprintf(stderr, "%s: not a model: %s\n", seed.name.c_str(), e.what());
      ok = false;
    }
  }
#if JITLLM_FUZZ_TOKENIZER
  if (seed.vocab) {
    try {
      jitllm::tokenizer::Tokenizer tokenizer(jitllm::tokenizer::vocabFromGguf(*f));
      tokenizer.encode("Hello, world!", true, true);
    } catch (const jitllm::Error& e) {
      std::fprintf(stderr, "%s: not a vocabulary: %s\n", seed.name.c_str(), e.what());
      ok = false;
    }
  }
#endif
  return ok;
}

// Dictionary entries: the magic, versions, and every key and tensor name the readers look up, both
// bare and with the u64 length prefix the file format puts before a string.
std::vector<std::string> dictionaryWords() {
  std::vector<std::string> words = {"general.alignment",
                                    "general.architecture",
                                    "general.name",
                                    "llama",
                                    "qwen2",
                                    "gpt2",
                                    "linear",
                                    "llama3",
                                    "none",
                                    "tokenizer.ggml.model",
                                    "tokenizer.ggml.pre",
                                    "tokenizer.ggml.tokens",
                                    "tokenizer.ggml.scores",
                                    "tokenizer.ggml.token_type",
                                    "tokenizer.ggml.merges",
                                    "tokenizer.ggml.bos_token_id",
                                    "tokenizer.ggml.eos_token_id",
                                    "tokenizer.ggml.unknown_token_id",
                                    "tokenizer.ggml.padding_token_id",
                                    "tokenizer.ggml.seperator_token_id",
                                    "tokenizer.ggml.eot_token_id",
                                    "tokenizer.ggml.eom_token_id",
                                    "tokenizer.ggml.add_bos_token",
                                    "tokenizer.ggml.add_eos_token",
                                    "tokenizer.ggml.add_space_prefix",
                                    "token_embd.weight",
                                    "output_norm.weight",
                                    "output.weight",
                                    "rope_freqs.weight",
                                    "blk.0.",
                                    "attn_norm.weight",
                                    "attn_q.weight",
                                    "attn_k.weight",
                                    "attn_v.weight",
                                    "attn_output.weight",
                                    "attn_q.bias",
                                    "attn_k.bias",
                                    "attn_v.bias",
                                    "ffn_norm.weight",
                                    "ffn_gate.weight",
                                    "ffn_up.weight",
                                    "ffn_down.weight"};
  for (const char* arch : {"llama.", "qwen2."}) {
    for (const char* key :
         {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
          "attention.head_count_kv", "attention.key_length", "rope.dimension_count", "rope.freq_base",
          "rope.scaling.type", "rope.scaling.factor", "attention.layer_norm_rms_epsilon"}) {
      words.push_back(std::string(arch) + key);
    }
  }
  return words;
}

std::string escape(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += char(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  return out;
}

std::string lengthPrefixed(const std::string& s) {
  std::string out(8, '\0');
  const uint64_t n = s.size();
  std::memcpy(out.data(), &n, 8);
  return out + s;
}

void writeDictionary(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << "# libFuzzer dictionary for gguf_fuzz; written by tests/fuzz/gguf_seed_corpus.cc.\n"
         "# Bare words, and the same with the u64 little-endian length that precedes a GGUF string.\n";
  out << "magic=\"GGUF\"\n";
  out << "v2=\"\\x02\\x00\\x00\\x00\"\nv3=\"\\x03\\x00\\x00\\x00\"\n";
  out << "u64_max=\"\\xFF\\xFF\\xFF\\xFF\\xFF\\xFF\\xFF\\xFF\"\n";
  out << "i64_min=\"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x80\"\n";
  out << "alignment_u32_type=\"\\x04\\x00\\x00\\x00\"\n";
  out << "array_type=\"\\x09\\x00\\x00\\x00\"\n";
  out << "string_type=\"\\x08\\x00\\x00\\x00\"\n";
  for (const std::string& w : dictionaryWords()) {
    out << "\"" << escape(w) << "\"\n";
    out << "\"" << escape(lengthPrefixed(w)) << "\"\n";
  }
  if (!out) JITLLM_FAIL(kFailed, path, ": write failed");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR DICT_FILE\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  for (const Seed& seed : seeds()) {
    if (seed.bytes.size() > kMaxSeedBytes) {
      std::fprintf(stderr, "%s: %zu bytes, over the %zu limit\n", seed.name.c_str(), seed.bytes.size(), kMaxSeedBytes);
      ok = false;
    }
    if (!check(seed)) ok = false;
    std::ofstream out(dir + "/" + seed.name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(seed.bytes.data()), std::streamsize(seed.bytes.size()));
    if (!out) {
      std::fprintf(stderr, "%s/%s: write failed\n", dir.c_str(), seed.name.c_str());
      ok = false;
    }
    std::printf("%-36s %6zu bytes\n", seed.name.c_str(), seed.bytes.size());
  }
  writeDictionary(argv[2]);
  return ok ? 0 : 1;
}
