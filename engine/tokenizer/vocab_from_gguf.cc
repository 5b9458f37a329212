#include "engine/tokenizer/vocab_from_gguf.h"

#include <limits>

#include "base/error.h"

namespace jitllm::tokenizer {
namespace {

// Token ids come as any integer type; some converters write uint32 4294967295 or int32 -1 for
// "none". Any integer is accepted here and range-checked by Tokenizer, as llama.cpp does.
std::optional<int64_t> readTokenId(const gguf::GgufFile& file, std::string_view key) {
  const gguf::Value* v = file.find(key);
  if (!v) return std::nullopt;
  JITLLM_REQUIRE(v->isInteger(), file.name(), ": ", key, " is a ", gguf::valueTypeName(v->type()),
                 ", not an integer token id");
  if (auto i = v->asInt()) return *i;
  return std::numeric_limits<int64_t>::max();  // a uint64 past int64: certainly no token
}

}  // namespace

VocabData vocabFromGguf(const gguf::GgufFile& file) {
  VocabData vocab;
  auto model = file.getString("tokenizer.ggml.model");
  JITLLM_REQUIRE(model, file.name(), ": no tokenizer.ggml.model key; the file has no tokenizer");
  vocab.model = std::move(*model);
  vocab.pre = file.getString("tokenizer.ggml.pre").value_or("");

  auto tokens = file.getStringArray("tokenizer.ggml.tokens");
  JITLLM_REQUIRE(tokens, file.name(), ": no tokenizer.ggml.tokens key");
  vocab.tokens = std::move(*tokens);

  if (auto scores = file.getF32Array("tokenizer.ggml.scores")) {
    JITLLM_REQUIRE(scores->size() == vocab.tokens.size(), file.name(),
                   ": tokenizer.ggml.scores has ", scores->size(), " entries for ",
                   vocab.tokens.size(), " tokens");
    vocab.scores = std::move(*scores);
  }
  if (auto types = file.getI32Array("tokenizer.ggml.token_type")) {
    JITLLM_REQUIRE(types->size() == vocab.tokens.size(), file.name(),
                   ": tokenizer.ggml.token_type has ", types->size(), " entries for ",
                   vocab.tokens.size(), " tokens");
    vocab.tokenTypes = std::move(*types);
  }
  if (auto merges = file.getStringArray("tokenizer.ggml.merges")) {
    vocab.merges = std::move(*merges);
  }

  vocab.bosId = readTokenId(file, "tokenizer.ggml.bos_token_id");
  vocab.eosId = readTokenId(file, "tokenizer.ggml.eos_token_id");
  vocab.unkId = readTokenId(file, "tokenizer.ggml.unknown_token_id");
  vocab.padId = readTokenId(file, "tokenizer.ggml.padding_token_id");
  vocab.sepId = readTokenId(file, "tokenizer.ggml.seperator_token_id");  // sic, as in GGUF
  vocab.eotId = readTokenId(file, "tokenizer.ggml.eot_token_id");
  vocab.eomId = readTokenId(file, "tokenizer.ggml.eom_token_id");
  // The fim_* keys replaced prefix/suffix/middle; llama.cpp reads both, the older ones last.
  vocab.fimPreId = readTokenId(file, "tokenizer.ggml.fim_pre_token_id");
  vocab.fimSufId = readTokenId(file, "tokenizer.ggml.fim_suf_token_id");
  vocab.fimMidId = readTokenId(file, "tokenizer.ggml.fim_mid_token_id");
  vocab.fimPadId = readTokenId(file, "tokenizer.ggml.fim_pad_token_id");
  vocab.fimRepId = readTokenId(file, "tokenizer.ggml.fim_rep_token_id");
  vocab.fimSepId = readTokenId(file, "tokenizer.ggml.fim_sep_token_id");
  for (auto [key, id] : {std::pair{"tokenizer.ggml.prefix_token_id", &vocab.fimPreId},
                         std::pair{"tokenizer.ggml.suffix_token_id", &vocab.fimSufId},
                         std::pair{"tokenizer.ggml.middle_token_id", &vocab.fimMidId}}) {
    // As in llama.cpp, an older key overrides only with an id that exists.
    auto old = readTokenId(file, key);
    if (old && *old >= 0 && uint64_t(*old) < vocab.tokens.size()) *id = old;
  }

  vocab.addBos = file.getBool("tokenizer.ggml.add_bos_token");
  vocab.addEos = file.getBool("tokenizer.ggml.add_eos_token");
  vocab.addSpacePrefix = file.getBool("tokenizer.ggml.add_space_prefix");
  vocab.modelName = file.getString("general.name").value_or("");
  return vocab;
}

}  // namespace jitllm::tokenizer
