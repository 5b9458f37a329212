// Shared by the tokenizer tests: where the shared vocab and model files (and the repository's own
// vocabularies) are, and loading them.
#pragma once

#include <string>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_from_gguf.h"

namespace jitllm::tokenizer::test_support {

inline std::string sharedPath(const std::string& relative) { return std::string(JITLLM_SHARED_DIR) + "/" + relative; }
// The repository's own test data (tests/goldens).
inline std::string goldenPath(const std::string& relative) { return std::string(JITLLM_GOLDENS_DIR) + "/" + relative; }

inline Tokenizer loadTokenizer(const std::string& path) {
  auto file = gguf::GgufFile::open(path);
  return Tokenizer(vocabFromGguf(*file));
}

}  // namespace jitllm::tokenizer::test_support
