// Reads a tokenizer vocabulary from a GGUF file's tokenizer.ggml.* metadata.
//
// The one place the tokenizer knows about GGUF: everything else works on VocabData.
//
// Thread-safety: a pure function of an immutable GgufFile.
#pragma once

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/vocab_data.h"

namespace jitllm::tokenizer {

// Error(FAILED), naming the file and key, when tokenizer.ggml.model or .tokens is missing, a key
// has the wrong type, or the scores/token_type arrays do not have one entry per token.
VocabData vocabFromGguf(const gguf::GgufFile& file);

}  // namespace jitllm::tokenizer
