// The chat template of a loaded model: its GGUF's tokenizer.chat_template with the vocabulary's
// BOS/EOS texts, ready to render (chat_template.h).
//
// Thread-safety: reads the model's immutable file and tokenizer; call from any thread.
#pragma once

#include <string>

#include "engine/chat/chat_template.h"
#include "engine/runtime/model.h"

namespace jitllm::runtime {

ChatTemplate chatTemplateForModel(const Model& model, std::string modelName);

}  // namespace jitllm::runtime
