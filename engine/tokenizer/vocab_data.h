// A tokenizer vocabulary as plain data: what a GGUF file's tokenizer.ggml.* keys say, and nothing
// decided yet. Tokenizer applies llama.cpp's defaults and checks to it; vocab_from_gguf.h fills it
// from a file. Keeping this a struct lets tests and tools build vocabularies without GGUF.
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace jitllm::tokenizer {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabData {
  // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE).
  std::string model;
  // tokenizer.ggml.pre: the BPE pre-tokenizer ("llama-bpe", "gpt-2", "qwen2", ...); empty if
  // absent.
  std::string pre;

  std::vector<std::string> tokens;
  std::vector<float> scores;        // empty, or one per token (SentencePiece merge priority)
  std::vector<int32_t> tokenTypes;  // empty (all normal), or one TokenType value per token
  std::vector<std::string> merges;  // BPE only: "left right", highest priority first

  // Special token ids exactly as the file gives them. A value outside [0, tokens.size()) - files
  // use 4294967295 to mean "none" - is ignored, keeping llama.cpp's default for that id.
  std::optional<int64_t> bosId;
  std::optional<int64_t> eosId;
  std::optional<int64_t> unkId;
  std::optional<int64_t> padId;
  std::optional<int64_t> sepId;
  std::optional<int64_t> eotId;
  std::optional<int64_t> eomId;
  // Fill-in-the-middle tokens; pad, repo and file-separator ones also end generation.
  std::optional<int64_t> fimPreId;
  std::optional<int64_t> fimSufId;
  std::optional<int64_t> fimMidId;
  std::optional<int64_t> fimPadId;
  std::optional<int64_t> fimRepId;
  std::optional<int64_t> fimSepId;

  // Absent flags take the model's defaults (SentencePiece: BOS yes, EOS no, space prefix yes).
  std::optional<bool> addBos;
  std::optional<bool> addEos;
  std::optional<bool> addSpacePrefix;

  // general.name, lower or upper case as written: llama.cpp keys a few per-model token attribute
  // fixes on it (Phi-3's special tokens swallow the whitespace after them).
  std::string modelName;
};

}  // namespace jitllm::tokenizer
