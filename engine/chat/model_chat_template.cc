#include "engine/chat/model_chat_template.h"

namespace jitllm::runtime {

ChatTemplate chatTemplateForFile(const gguf::GgufFile& file, const tokenizer::Tokenizer& tok, std::string modelName) {
  auto text = [&](int32_t id) {
    return id >= 0 && id < tok.vocabSize() ? std::string(tok.tokenText(id)) : std::string();
  };
  return ChatTemplate::fromModel(file.getString("tokenizer.chat_template"), text(tok.bosId()), text(tok.eosId()),
                                 std::move(modelName), tok.addBos());
}

ChatTemplate chatTemplateForModel(const Model& model, std::string modelName) {
  return chatTemplateForFile(model.file(), model.tokenizer(), std::move(modelName));
}

}  // namespace jitllm::runtime
