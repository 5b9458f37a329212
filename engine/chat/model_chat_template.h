// The chat template of a model: its GGUF's tokenizer.chat_template with the vocabulary's BOS/EOS
// texts, ready to render (chat_template.h).
//
// Thread-safety: reads the immutable file and tokenizer; call from any thread.
#pragma once

#include <string>

#include "engine/chat/chat_template.h"
#include "engine/gguf/gguf_file.h"
#include "engine/runtime/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace jitllm::runtime {

ChatTemplate chatTemplateForModel(const Model& model, std::string modelName);
// The same from a file whose weights were not loaded (jitllm-run --render-only).
ChatTemplate chatTemplateForFile(const gguf::GgufFile& file, const tokenizer::Tokenizer& tok, std::string modelName);

}  // namespace jitllm::runtime
