#include "engine/chat/model_chat_template.h"

namespace jitllm::runtime {

ChatTemplate chatTemplateForModel(const Model& model, std::string modelName) {
  const auto& tok = model.tokenizer();
  auto text = [&](int32_t id) {
    return id >= 0 && id < tok.vocabSize() ? std::string(tok.tokenText(id)) : std::string();
  };
  return ChatTemplate::fromModel(model.file().getString("tokenizer.chat_template"), text(tok.bosId()),
                                 text(tok.eosId()), std::move(modelName), tok.addBos());
}

}  // namespace jitllm::runtime
