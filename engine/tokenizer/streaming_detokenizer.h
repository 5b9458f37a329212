// Turns generated token ids, one at a time, into text that is safe to send: only whole, valid
// UTF-8 characters ever come out.
//
// A token's piece may end inside a character (byte-fallback tokens, byte-level BPE splitting an
// emoji); those bytes wait here until the next pieces complete them. Bytes that can never become
// a valid character are replaced by U+FFFD, one per maximal ill-formed subpart (the Unicode
// recommended practice), as soon as they are known to be bad; flush() does the same for an
// unfinished character at the end.
//
// Pieces are llama_token_to_piece(vocab, id, buf, n, 0, renderSpecial), which is what llama.cpp's
// llama-greedy prints per generated token: no space is stripped unless asked.
//
// Ownership: borrows the Tokenizer, which must outlive this object.
// Thread-safety: none; one stream per object, used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace jitllm::tokenizer {

class StreamingDetokenizer final {
 public:
  struct Options {
    // Control tokens (e.g. "<|eot_id|>") print their text; llama-greedy passes special = true.
    bool renderSpecial = true;
    // Strip one leading space from the first non-empty piece when the model adds a SentencePiece
    // space prefix - for showing a prompt's own tokens as the text they came from. Off by default,
    // since generated text continues a prompt and llama-greedy does not strip.
    bool stripPrefixSpace = false;
  };

  explicit StreamingDetokenizer(const Tokenizer& tokenizer);
  StreamingDetokenizer(const Tokenizer& tokenizer, Options options);

  // Adds `id`'s piece; returns the text completed by it (often empty, never invalid UTF-8).
  // Error(FAILED) for an id outside the vocabulary, leaving the stream as it was.
  std::string feed(int32_t id);

  // Ends the stream: returns what is still held, an unfinished character as U+FFFD, and starts
  // over as if new.
  std::string flush();

  // Drops anything held and starts over.
  void reset();

  // Bytes held back, waiting for the rest of a character.
  size_t pendingBytes() const { return pending_.size(); }

 private:
  // Moves every decidable character from pending_ to `out`, keeping a trailing incomplete one.
  void drain(std::string& out, bool final);

  const Tokenizer& tokenizer_;
  Options options_;
  std::string pending_;
  bool sawText_ = false;
};

}  // namespace jitllm::tokenizer
