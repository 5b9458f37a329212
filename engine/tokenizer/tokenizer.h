// A model's tokenizer: text -> token ids and back, matching llama.cpp token for token.
//
// Built from a VocabData (see vocab_from_gguf.h for reading one from a GGUF file). Two algorithms
// sit behind one class, chosen by tokenizer.ggml.model: SentencePiece-style ("llama") and
// byte-level BPE ("gpt2", with the pre-tokenizer named by tokenizer.ggml.pre). Construction applies
// llama.cpp's defaults (special ids, add_bos / add_eos / add_space_prefix), its end-of-generation
// detection by token text, and precomputes every token's piece so that detokenizing is a lookup.
//
// Ownership: owns its vocabulary, merges and caches (through a private state object, so moves are
// cheap and the header stays small).
// Thread-safety: immutable after construction; every const method may be called from many threads
// at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/token_table.h"
#include "engine/tokenizer/vocab_data.h"

namespace jitllm::tokenizer {

enum class VocabKind {
  kSentencePiece,  // tokenizer.ggml.model = "llama"
  kBytePairGpt2,   // tokenizer.ggml.model = "gpt2"
};

class Tokenizer final {
 public:
  // Error(FAILED) for a vocabulary that cannot work (unknown model, no tokens, BOS required but
  // absent); Error(UNIMPLEMENTED) for a BPE pre-tokenizer this build does not have.
  explicit Tokenizer(VocabData vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // llama_tokenize(vocab, text, addSpecial, parseSpecial): addSpecial adds BOS/EOS as the model's
  // add_bos/add_eos say; parseSpecial lets control tokens written in the text (e.g. "<|eot_id|>")
  // become those tokens. User-defined tokens are matched either way.
  std::vector<int32_t> encode(std::string_view text, bool addSpecial, bool parseSpecial) const;

  // The bytes token `id` stands for, as llama_token_to_piece(vocab, id, buf, n, 0, renderSpecial):
  // SentencePiece U+2581 becomes a space and <0xXX> that byte; BPE text is mapped back from GPT-2's
  // byte alphabet. Control and unknown tokens give their text only when renderSpecial. The bytes
  // need not be valid UTF-8 on their own (a byte token, half of a character). Error(FAILED) for an
  // id outside the vocabulary. The view lives as long as the Tokenizer.
  std::string_view tokenPiece(int32_t id, bool renderSpecial = true) const;

  // llama_detokenize(vocab, ids, n, buf, size, removeSpecial, unparseSpecial): concatenated pieces,
  // minus the SentencePiece prefix space, minus BOS/EOS when removeSpecial, with the BPE models'
  // clean-up of spaces before punctuation where the model asks for it.
  std::string detokenize(std::span<const int32_t> ids, bool removeSpecial,
                         bool unparseSpecial) const;

  VocabKind kind() const;
  int32_t vocabSize() const;
  std::string_view tokenText(int32_t id) const;  // the vocabulary's text, unmapped
  float tokenScore(int32_t id) const;
  uint32_t tokenAttributes(int32_t id) const;  // TokenAttr bits
  bool isControl(int32_t id) const { return tokenAttributes(id) & kAttrControl; }
  bool isUserDefined(int32_t id) const { return tokenAttributes(id) & kAttrUserDefined; }
  bool isByte(int32_t id) const { return tokenAttributes(id) & kAttrByte; }
  bool isUnknown(int32_t id) const { return tokenAttributes(id) & kAttrUnknown; }
  // EOS, EOT, EOM and the tokens llama.cpp recognises by text ("<|eot_id|>", "<|im_end|>", ...).
  bool isEndOfGeneration(int32_t id) const;
  // The text -> id lookup of the vocabulary (exact text), kNoToken when absent.
  int32_t findToken(std::string_view text) const;

  // Special ids after defaults and range checks; kNoToken when the model has none.
  int32_t bosId() const;
  int32_t eosId() const;
  int32_t eotId() const;
  int32_t eomId() const;
  int32_t unkId() const;
  int32_t padId() const;
  bool addBos() const;
  bool addEos() const;
  bool addSpacePrefix() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace jitllm::tokenizer
