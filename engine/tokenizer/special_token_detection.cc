#include "engine/tokenizer/special_token_detection.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string>

namespace jitllm::tokenizer {
namespace {

using Texts = std::initializer_list<std::string_view>;

// The lists below are copied from llama.cpp v0.4.0's llama_vocab::impl::load, in its order.
const Texts kEotTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
    "<end_of_utterance>",
};
const Texts kEomTexts = {"<|eom_id|>"};
const Texts kFimPreTexts = {
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "begin\xEF\xBD\x9C>",  // DeepSeek
    "<PRE>",
    "\xE2\x96\x81<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
};
const Texts kFimSufTexts = {
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81hole\xEF\xBD\x9C>",  // DeepSeek
    "<SUF>",
    "\xE2\x96\x81<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
};
const Texts kFimMidTexts = {
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81"
    "end\xEF\xBD\x9C>",  // DeepSeek
    "<MID>",
    "\xE2\x96\x81<MID>",
    "<|code_middle|>",
    "<|middle|>",
};
const Texts kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const Texts kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const Texts kFimSepTexts = {"<|file_sep|>"};
const Texts kEndOfGenerationTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~[",
};
// gpt-oss: llama.cpp always renders these, so it makes them user-defined.
const Texts kAlwaysRenderedTexts = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

void addControl(TokenTable& table, int32_t id) {
  table.setAttributes(id, table.attributes(id) | kAttrControl);
}

// Fills `id` from the first text that is a token, when the file left it unknown.
void detect(TokenTable& table, int32_t& id, const Texts& texts) {
  if (id != kNoToken) return;
  for (std::string_view text : texts) {
    if (int32_t found = table.find(text); found != kNoToken) {
      id = found;
      addControl(table, found);
      return;
    }
  }
}

}  // namespace

std::unordered_set<int32_t> detectSpecialTokens(TokenTable& table, SpecialTokenIds& ids,
                                                std::string_view modelName) {
  detect(table, ids.eot, kEotTexts);
  detect(table, ids.eom, kEomTexts);
  detect(table, ids.fimPre, kFimPreTexts);
  detect(table, ids.fimSuf, kFimSufTexts);
  detect(table, ids.fimMid, kFimMidTexts);
  detect(table, ids.fimPad, kFimPadTexts);
  detect(table, ids.fimRep, kFimRepTexts);
  detect(table, ids.fimSep, kFimSepTexts);

  // Control tokens whose text says "unused" are unused (reserved slots, never generated).
  for (int32_t id = 0; id < table.size(); ++id) {
    const uint32_t attrs = table.attributes(id);
    if ((attrs & kAttrControl) && !(attrs & kAttrUnused) &&
        table.text(id).find("unused") != std::string_view::npos) {
      table.setAttributes(id, attrs | kAttrUnused);
    }
  }

  std::unordered_set<int32_t> endOfGeneration;
  for (int32_t id : {ids.fimPad, ids.fimRep, ids.fimSep}) {
    if (id != kNoToken) endOfGeneration.insert(id);
  }
  for (std::string_view text : kEndOfGenerationTexts) {
    if (int32_t id = table.find(text); id != kNoToken) {
      endOfGeneration.insert(id);
      addControl(table, id);
    }
  }
  for (std::string_view text : kAlwaysRenderedTexts) {
    if (int32_t id = table.find(text); id != kNoToken) {
      table.setAttributes(id, kAttrUserDefined);
    }
  }
  for (int32_t id : {ids.eos, ids.eot, ids.eom}) {
    if (id != kNoToken) endOfGeneration.insert(id);
  }

  // Harmony (gpt-oss) and Solar-Open end turns with "<|end|>" but keep generating after it.
  auto inSet = [&](std::string_view text) {
    const int32_t id = table.find(text);
    return id != kNoToken && endOfGeneration.count(id) != 0;
  };
  const bool anyCall = inSet("<|call|>") || inSet("<|calls|>");
  if (inSet("<|end|>") && anyCall && (inSet("<|return|>") || inSet("<|flush|>"))) {
    const int32_t end = table.find("<|end|>");
    endOfGeneration.erase(end);
    table.setAttributes(end, kAttrUserDefined);
  }
  // Gemma 4 and PaddleOCR: "</s>" is text there, not an end.
  if (inSet("<|tool_response>") && inSet("</s>")) {
    const int32_t s = table.find("</s>");
    endOfGeneration.erase(s);
    table.setAttributes(s, kAttrNormal);
  }

  // Phi-3: every special token eats the whitespace after it, except these three.
  std::string name(modelName);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    auto setRstrip = [&](int32_t id, bool on) {
      const uint32_t attrs = table.attributes(id);
      table.setAttributes(id, on ? (attrs | kAttrRstrip) : (attrs & ~uint32_t{kAttrRstrip}));
    };
    for (int32_t id = 0; id < table.size(); ++id) {
      if (table.attributes(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
        setRstrip(id, true);
      }
    }
    if (int32_t id = table.find("</s>"); id != kNoToken) setRstrip(id, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t id = table.find(text); id != kNoToken) setRstrip(id, false);
    }
  }
  return endOfGeneration;
}

}  // namespace jitllm::tokenizer
