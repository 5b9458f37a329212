#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <unordered_set>

#include "base/error.h"
#include "engine/tokenizer/bpe_encoder.h"
#include "engine/tokenizer/gpt2_byte_map.h"
#include "engine/tokenizer/special_token_detection.h"
#include "engine/tokenizer/special_token_splitter.h"
#include "engine/tokenizer/spm_encoder.h"
#include "engine/tokenizer/utf8.h"

namespace jitllm::tokenizer {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

uint32_t attributesOfType(int32_t type) {
  switch (TokenType(type)) {
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

struct PreTokenizerChoice {
  PreTokenizerKind kind;
  bool ignoreMerges = false;
  bool addBos = false;
  bool cleanSpaces = true;
};

// tokenizer.ggml.pre -> what llama.cpp's llama_vocab::impl::load sets for it. Only names whose
// regex this build implements are listed; others are UNIMPLEMENTED rather than silently wrong.
std::optional<PreTokenizerChoice> preTokenizerFor(std::string_view pre) {
  using K = PreTokenizerKind;
  auto in = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), pre) != names.end();
  };
  if (pre.empty() || pre == "default") return PreTokenizerChoice{K::kDefault};
  if (in({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"})) {
    return PreTokenizerChoice{K::kLlama3, /*ignoreMerges=*/true, /*addBos=*/true};
  }
  if (in({"dbrx", "smaug-bpe"})) return PreTokenizerChoice{K::kLlama3};
  if (in({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
          "exaone4"})) {
    return PreTokenizerChoice{K::kGpt2};
  }
  if (in({"qwen2", "deepseek-r1-qwen", "kormo"})) {
    return PreTokenizerChoice{K::kQwen2, false, false, /*cleanSpaces=*/false};
  }
  if (in({"megrez", "stablelm2"})) return PreTokenizerChoice{K::kQwen2};
  if (in({"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) {
    return PreTokenizerChoice{K::kGpt4o, false, false, /*cleanSpaces=*/false};
  }
  if (in({"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"})) {
    return PreTokenizerChoice{K::kDigitsThenGpt2};
  }
  if (in({"command-r", "smollm"})) return PreTokenizerChoice{K::kDigitsThenGpt2, false, false, /*cleanSpaces=*/false};
  return std::nullopt;
}

// llama.cpp's llama_decode_text: GPT-2 alphabet back to bytes; a code point outside the alphabet
// is spelled out as it spells it.
std::string decodeGpt2Text(std::string_view text) {
  std::string out;
  std::vector<uint32_t> cps;
  utf8::decodeLenient(text, cps);
  for (uint32_t cp : cps) {
    const int byte = gpt2_bytes::decodeCodepoint(cp);
    if (byte >= 0) {
      out.push_back(char(byte));
      continue;
    }
    std::string utf8Text;
    utf8::append(utf8Text, cp);
    out += "[UNK_BYTE_0x";
    for (char c : utf8Text) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", unsigned(uint8_t(c)));
      out += hex;
    }
    out.append(text);
    out += "]";
  }
  return out;
}

// llama.cpp's token_to_byte for SentencePiece: the two hex digits of "<0xXX>".
char byteOfByteToken(std::string_view text) {
  unsigned value = 0;
  for (size_t i = 3; i < 5 && i < text.size(); ++i) {
    const char c = text[i];
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = unsigned(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = unsigned(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = unsigned(c - 'A' + 10);
    } else {
      break;  // strtol stops at the first non-digit
    }
    value = value * 16 + digit;
  }
  return char(value);
}

void replaceAll(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// llama_detokenize's clean_spaces passes, for BPE models trained with Hugging Face's
// clean_up_tokenization_spaces: drop the space in " ?", " !", " .", " ,", " 's", " 'm", " 're",
// " 've", and both spaces around a lone " ' ". Ported index for index, in place, because the passes
// read what earlier steps wrote (pass two plants a NUL) and the quirks are part of the output.
std::string cleanSpaces(std::string text) {
  char* t = text.data();
  int32_t total = int32_t(text.size());

  const int32_t total1 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total1; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    t[total++] = x;
  }

  const int32_t total2 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total2; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < total2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
      total--;
      t[++i] = '\0';
    }
    t[total++] = x;
  }

  const int32_t total3 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total3; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
      }
    }
    t[total++] = x;
  }
  text.resize(size_t(total));
  return text;
}

}  // namespace

struct Tokenizer::State {
  State(VocabKind kind, std::vector<std::string> texts, std::vector<float> scores, std::vector<uint32_t> attributes)
      : kind(kind), table(std::move(texts), std::move(scores), std::move(attributes)) {}

  VocabKind kind;
  TokenTable table;
  std::unique_ptr<SpecialTokenSplitter> splitter;
  std::unique_ptr<SpmEncoder> spm;
  std::unique_ptr<BpeEncoder> bpe;

  int32_t bos = kNoToken;
  int32_t eos = kNoToken;
  int32_t eot = kNoToken;
  int32_t eom = kNoToken;
  int32_t unk = kNoToken;
  int32_t pad = kNoToken;
  bool addBos = false;
  bool addEos = false;
  bool addSpacePrefix = false;
  bool cleanSpaces = false;
  std::unordered_set<int32_t> endOfGeneration;

  // Every token's piece with specials rendered, end to end; token i is
  // pieces[pieceOffsets[i], pieceOffsets[i + 1]).
  std::string pieces;
  std::vector<uint32_t> pieceOffsets;

  std::string computePiece(int32_t id) const {
    const uint32_t attrs = table.attributes(id);
    const std::string_view text = table.text(id);
    if (attrs & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return std::string(text);
    if (kind == VocabKind::kSentencePiece) {
      if (attrs & kAttrNormal) {
        std::string piece(text);
        replaceAll(piece, kSpaceMarker, " ");
        return piece;
      }
      if (attrs & kAttrByte) return std::string(1, byteOfByteToken(text));
      return {};
    }
    if (attrs & kAttrNormal) return decodeGpt2Text(text);
    if (attrs & kAttrByte) return std::string(1, byteOfByteToken(text));
    return {};  // unused and undefined tokens render as nothing, as in llama.cpp
  }
};

Tokenizer::Tokenizer(VocabData vocab) {
  VocabKind kind;
  if (vocab.model == "llama") {
    kind = VocabKind::kSentencePiece;
  } else if (vocab.model == "gpt2") {
    kind = VocabKind::kBytePairGpt2;
  } else {
    JITLLM_FAIL(kUnimplemented, "tokenizer model '", vocab.model, "' is not supported (only 'llama' and 'gpt2')");
  }
  const size_t n = vocab.tokens.size();
  JITLLM_REQUIRE(n > 0, "the vocabulary has no tokens");
  JITLLM_REQUIRE(n < size_t(INT32_MAX), "the vocabulary has ", n, " tokens, too many for int32 ids");
  JITLLM_REQUIRE(vocab.scores.empty() || vocab.scores.size() == n, "the vocabulary has ", vocab.scores.size(),
                 " scores for ", n, " tokens");
  JITLLM_REQUIRE(vocab.tokenTypes.empty() || vocab.tokenTypes.size() == n, "the vocabulary has ",
                 vocab.tokenTypes.size(), " token types for ", n, " tokens");

  std::vector<uint32_t> attributes(n, kAttrNormal);
  for (size_t i = 0; i < vocab.tokenTypes.size(); ++i) {
    attributes[i] = attributesOfType(vocab.tokenTypes[i]);
  }
  if (vocab.scores.empty()) vocab.scores.assign(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp renames empty tokens so that no two share the empty text.
    if (vocab.tokens[i].empty()) vocab.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
  }
  state_ = std::make_unique<State>(kind, std::move(vocab.tokens), std::move(vocab.scores), std::move(attributes));
  State& s = *state_;
  const int32_t count = int32_t(n);
  auto valid = [&](int32_t id) { return id >= 0 && id < count ? id : kNoToken; };

  // Model defaults, then what the file says (llama_vocab::impl::load).
  PreTokenizerChoice pre{PreTokenizerKind::kDefault};
  if (kind == VocabKind::kSentencePiece) {
    s.bos = valid(1);
    s.eos = valid(2);
    s.unk = valid(0);
    s.addBos = true;
    s.addSpacePrefix = true;
  } else {
    auto choice = preTokenizerFor(vocab.pre);
    if (!choice) {
      JITLLM_FAIL(kUnimplemented, "BPE pre-tokenizer '", vocab.pre,
                  "' is not supported (have: default, gpt-2, llama-bpe/llama3, qwen2 and aliases)");
    }
    pre = *choice;
    s.bos = valid(11);  // llama.cpp's GPT-2 defaults, for files that name neither
    s.eos = valid(11);
    s.addBos = pre.addBos;
    s.cleanSpaces = pre.cleanSpaces;
  }
  // An id outside the vocabulary (4294967295 is the usual "none") keeps the default.
  auto override = [&](int32_t& id, const std::optional<int64_t>& fromFile) {
    if (fromFile && *fromFile >= 0 && *fromFile < count) id = int32_t(*fromFile);
  };
  override(s.bos, vocab.bosId);
  override(s.eos, vocab.eosId);
  override(s.eot, vocab.eotId);
  override(s.eom, vocab.eomId);
  override(s.unk, vocab.unkId);
  override(s.pad, vocab.padId);
  if (vocab.addBos) s.addBos = *vocab.addBos;
  if (vocab.addEos) s.addEos = *vocab.addEos;
  if (vocab.addSpacePrefix) s.addSpacePrefix = *vocab.addSpacePrefix;
  JITLLM_REQUIRE(!s.addBos || s.bos != kNoToken, "add_bos_token is true, but there is no BOS token");
  JITLLM_REQUIRE(!s.addEos || s.eos != kNoToken, "add_eos_token is true, but there is no EOS token");

  // Special tokens found by text, as llama.cpp does until files say so themselves.
  SpecialTokenIds special;
  special.eos = s.eos;
  special.eot = s.eot;
  special.eom = s.eom;
  override(special.fimPre, vocab.fimPreId);
  override(special.fimSuf, vocab.fimSufId);
  override(special.fimMid, vocab.fimMidId);
  override(special.fimPad, vocab.fimPadId);
  override(special.fimRep, vocab.fimRepId);
  override(special.fimSep, vocab.fimSepId);
  TokenTable& table = s.table;
  s.endOfGeneration = detectSpecialTokens(table, special, vocab.modelName);
  s.eot = special.eot;
  s.eom = special.eom;

  s.splitter = std::make_unique<SpecialTokenSplitter>(table);
  if (kind == VocabKind::kSentencePiece) {
    s.spm = std::make_unique<SpmEncoder>(table, s.unk);
  } else {
    s.bpe = std::make_unique<BpeEncoder>(table, vocab.merges, pre.kind, pre.ignoreMerges);
  }

  s.pieceOffsets.reserve(n + 1);
  s.pieceOffsets.push_back(0);
  for (int32_t id = 0; id < count; ++id) {
    s.pieces += s.computePiece(id);
    JITLLM_REQUIRE(s.pieces.size() < UINT32_MAX, "token pieces exceed 4 GiB");
    s.pieceOffsets.push_back(uint32_t(s.pieces.size()));
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool addSpecial, bool parseSpecial) const {
  const State& s = *state_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<TextFragment> fragments = s.splitter->split(text, parseSpecial);

  if (addSpecial && s.addBos) out.push_back(s.bos);
  if (s.kind == VocabKind::kSentencePiece) {
    // SentencePiece prefixes a space to text that starts the input or follows a special token.
    bool afterSpecial = true;
    std::string escaped;
    for (const TextFragment& f : fragments) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        afterSpecial = true;
        continue;
      }
      escaped.clear();
      if (s.addSpacePrefix && afterSpecial) escaped.append(kSpaceMarker);
      for (char c : text.substr(f.offset, f.length)) {
        if (c == ' ') {
          escaped.append(kSpaceMarker);
        } else {
          escaped.push_back(c);
        }
      }
      s.spm->encode(escaped, out);
      afterSpecial = false;
    }
  } else {
    for (const TextFragment& f : fragments) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
      } else {
        s.bpe->encode(text.substr(f.offset, f.length), out);
      }
    }
  }
  if (addSpecial && s.addEos) out.push_back(s.eos);
  return out;
}

std::string_view Tokenizer::tokenPiece(int32_t id, bool renderSpecial) const {
  const State& s = *state_;
  JITLLM_REQUIRE(s.table.contains(id), "token id ", id, " is outside the vocabulary of ", s.table.size());
  if (!renderSpecial && (s.table.attributes(id) & (kAttrUnknown | kAttrControl))) return {};
  const uint32_t begin = s.pieceOffsets[size_t(id)];
  return std::string_view(s.pieces).substr(begin, s.pieceOffsets[size_t(id) + 1] - begin);
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool removeSpecial, bool unparseSpecial) const {
  const State& s = *state_;
  // llama.cpp strips the SentencePiece prefix space from the first piece - except right after a
  // BOS it removed, a quirk kept here so that results match.
  bool removeSpace = s.addSpacePrefix;
  if (removeSpecial && s.addBos && !ids.empty() && ids.front() == s.bos) {
    removeSpace = false;
    ids = ids.subspan(1);
  }
  if (removeSpecial && s.addEos && !ids.empty() && ids.back() == s.eos) {
    ids = ids.subspan(0, ids.size() - 1);
  }
  std::string text;
  for (int32_t id : ids) {
    std::string_view piece = tokenPiece(id, unparseSpecial);
    if (removeSpace && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    removeSpace = false;
    text.append(piece);
  }
  if (s.cleanSpaces) text = cleanSpaces(std::move(text));
  return text;
}

VocabKind Tokenizer::kind() const { return state_->kind; }
int32_t Tokenizer::vocabSize() const { return state_->table.size(); }

std::string_view Tokenizer::tokenText(int32_t id) const {
  JITLLM_REQUIRE(state_->table.contains(id), "token id ", id, " is outside the vocabulary");
  return state_->table.text(id);
}

float Tokenizer::tokenScore(int32_t id) const {
  JITLLM_REQUIRE(state_->table.contains(id), "token id ", id, " is outside the vocabulary");
  return state_->table.score(id);
}

uint32_t Tokenizer::tokenAttributes(int32_t id) const {
  JITLLM_REQUIRE(state_->table.contains(id), "token id ", id, " is outside the vocabulary");
  return state_->table.attributes(id);
}

bool Tokenizer::isEndOfGeneration(int32_t id) const { return state_->endOfGeneration.count(id) != 0; }

int32_t Tokenizer::findToken(std::string_view text) const { return state_->table.find(text); }

int32_t Tokenizer::bosId() const { return state_->bos; }
int32_t Tokenizer::eosId() const { return state_->eos; }
int32_t Tokenizer::eotId() const { return state_->eot; }
int32_t Tokenizer::eomId() const { return state_->eom; }
int32_t Tokenizer::unkId() const { return state_->unk; }
int32_t Tokenizer::padId() const { return state_->pad; }
bool Tokenizer::addBos() const { return state_->addBos; }
bool Tokenizer::addEos() const { return state_->addEos; }
bool Tokenizer::addSpacePrefix() const { return state_->addSpacePrefix; }

}  // namespace jitllm::tokenizer
