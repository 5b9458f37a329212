// libFuzzer target: tokenizing arbitrary bytes with a SentencePiece vocabulary (llama-spm) and a
// byte-level BPE one (llama-bpe) must not crash, must give only ids inside the vocabulary, and
// detokenizing - whole or streamed - must not crash; streamed text must always be valid UTF-8.
//
// The vocabularies come from JITLLM_SHARED_DIR/vocab (set by tokenizer.cmake).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/tokenizer/vocab_from_gguf.h"

namespace {

using jitllm::tokenizer::StreamingDetokenizer;
using jitllm::tokenizer::Tokenizer;

const Tokenizer& load(const char* name) {
  const std::string path = std::string(JITLLM_SHARED_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
  auto file = jitllm::gguf::GgufFile::open(path);
  return *new Tokenizer(jitllm::tokenizer::vocabFromGguf(*file));  // lives for the process
}

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
  std::abort();
}

void exercise(const Tokenizer& tokenizer, std::string_view text, bool addSpecial, bool parseSpecial) {
  const std::vector<int32_t> ids = tokenizer.encode(text, addSpecial, parseSpecial);
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocabSize()) bug("an id outside the vocabulary");
  }
  (void)tokenizer.detokenize(ids, addSpecial, parseSpecial);
  StreamingDetokenizer stream(tokenizer, {.renderSpecial = parseSpecial});
  for (int32_t id : ids) {
    if (!jitllm::tokenizer::utf8::isValid(stream.feed(id))) bug("streamed invalid UTF-8");
  }
  if (!jitllm::tokenizer::utf8::isValid(stream.flush())) bug("flushed invalid UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer& spm = load("llama-spm");
  static const Tokenizer& bpe = load("llama-bpe");
  if (size > 4096) return 0;  // long inputs only slow the search down
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first byte picks the flags, so the fuzzer explores both ways of handling specials.
  const bool addSpecial = size > 0 && (data[0] & 1);
  const bool parseSpecial = size > 0 && (data[0] & 2);
  exercise(spm, text, addSpecial, parseSpecial);
  exercise(bpe, text, addSpecial, parseSpecial);
  return 0;
}
