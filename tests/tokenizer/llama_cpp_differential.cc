// Differential check against llama.cpp itself (libllama from ../shared/peer/setup): random text
// built from awkward pieces (contractions, digits, every kind of whitespace, scripts, emoji,
// special token texts, invalid UTF-8) must tokenize to the same ids with every
// add_special/parse_special combination, detokenize to the same bytes with every
// remove_special/unparse_special combination, and every token's piece, control and
// end-of-generation flags must agree.
//
// Built only when the peer build is found (see CMakeLists.txt); run as
//   tokenizer_llama_cpp_differential [INPUTS_PER_VOCAB [SEED [MORE.gguf ...]]]
// (MORE: vocabularies checked beside the shared four, e.g. one `jitllm-mkmodel --vocab-only` wrote)
// Exit status 0 when everything agrees. Inputs llama.cpp throws on (code points past U+10FFFF)
// are skipped; jitllm reads those as U+FFFD instead of failing.

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_from_gguf.h"
#include "llama.h"

namespace {

using jitllm::tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

Ids llamaEncode(const llama_vocab* v, const std::string& s, bool add, bool parse) {
  int n = -llama_tokenize(v, s.data(), int(s.size()), nullptr, 0, add, parse);
  Ids out(size_t(n < 0 ? 0 : n));
  const int m = llama_tokenize(v, s.data(), int(s.size()), out.data(), int(out.size()), add, parse);
  out.resize(size_t(m < 0 ? 0 : m));
  return out;
}

std::string llamaPiece(const llama_vocab* v, int32_t id, bool special) {
  char buf[1024];
  const int n = llama_token_to_piece(v, id, buf, sizeof buf, 0, special);
  return n < 0 ? std::string("<too long>") : std::string(buf, size_t(n));
}

std::string llamaDetokenize(const llama_vocab* v, const Ids& ids, bool remove, bool unparse) {
  std::vector<char> buf(ids.size() * 64 + 64);
  const int n = llama_detokenize(v, ids.data(), int(ids.size()), buf.data(), int(buf.size()), remove, unparse);
  return std::string(buf.data(), size_t(n < 0 ? 0 : n));
}

std::string hex(const std::string& s) {
  std::string out;
  char b[4];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof b, "%02x ", c);
    out += b;
  }
  return out;
}

const std::vector<std::string> kPieces = {
    "a",
    "b",
    "Z",
    "e",
    "s",
    "t",
    "re",
    "ve",
    "ll",
    "d",
    "m",
    "S",
    "T",
    "M",
    "LL",
    "'",
    "\"",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\v",
    "\f",
    "\x1c",
    "0",
    "1",
    "7",
    "123",
    "4567",
    ".",
    ",",
    "!",
    "?",
    "(",
    ")",
    "$",
    "+",
    "<",
    "=",
    ">",
    "^",
    "~",
    "|",
    "_",
    "-",
    "/",
    "\xC3\xA9",
    "\xC3\x84",
    "\xE2\x96\x81",
    "\xD9\xA3",
    "\xE3\x80\x80",
    "\xC2\xA0",
    "\xC2\x85",
    "\xE2\x80\xAF",
    "\xE2\x80\x8B",
    "\xE4\xB8\xAD",
    "\xE6\x96\x87",
    "\xE1\x9E\x80",
    "\xE1\x9F\x8B",
    "\xF0\x9F\xA6\x99",
    "\xF0\x9F\x98\x81",
    "\xE2\x9C\x85",
    "\xCC\x81",
    "\xD0\xBD\xD0\xB5",
    "\xE2\x85\xA0",
    "\xC2\xB2",
    "\xEF\xBC\x91",
    "\xFF",
    "\xC0\xAF",
    "\x80",
    "\xE2\x82",
    "\xF0\x9F",
    "\xED\xA0\x80",
    "\xFE",
    "<s>",
    "</s>",
    "<unk>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "[PAD151934]",
    "<|reserved_special_token_5|>",
    "Hello",
    " world",
    "don't",
    "I'M",
    "they'RE",
    "<0x0A>",
    "\xE2\x96\x81Hello",
    std::string(1, '\0'),
    "\xF3\xA0\x80\x81",
    "\xEF\xBF\xBD",
    "\xF0\x90\x8C\xB0",
    "\xE0\xA4\xA8\xE0\xA4\xBF",
    " ' ",
};

}  // namespace

int main(int argc, char** argv) {
  const int inputs = argc > 1 ? std::atoi(argv[1]) : 5000;
  const unsigned seed = argc > 2 ? unsigned(std::atoi(argv[2])) : 1234u;
  llama_backend_init();
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  int totalBad = 0;
  std::vector<std::string> paths;
  for (const char* shared : {"llama-spm", "llama-bpe", "qwen2", "gpt-2"}) {
    paths.push_back(std::string(JITLLM_SHARED_DIR) + "/vocab/ggml-vocab-" + shared + ".gguf");
  }
  for (int i = 3; i < argc; ++i) paths.push_back(argv[i]);
  for (const std::string& path : paths) {
    const char* name = path.c_str();
    llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    llama_model* model = llama_model_load_from_file(path.c_str(), params);
    if (!model) {
      std::printf("%s: llama.cpp cannot load %s\n", name, path.c_str());
      return 2;
    }
    const llama_vocab* v = llama_model_get_vocab(model);
    const Tokenizer ours(jitllm::tokenizer::vocabFromGguf(*jitllm::gguf::GgufFile::open(path)));
    int bad = 0, skipped = 0;
    auto report = [&](const std::string& what) {
      if (bad++ < 10) std::printf("%s: %s\n", name, what.c_str());
    };

    if (llama_vocab_bos(v) != ours.bosId() || llama_vocab_eos(v) != ours.eosId() ||
        llama_vocab_eot(v) != ours.eotId() || llama_vocab_get_add_bos(v) != ours.addBos() ||
        llama_vocab_get_add_eos(v) != ours.addEos()) {
      report("special ids or add_bos/add_eos differ: bos " + std::to_string(llama_vocab_bos(v)) + "/" +
             std::to_string(ours.bosId()) + " eos " + std::to_string(llama_vocab_eos(v)) + "/" +
             std::to_string(ours.eosId()) + " eot " + std::to_string(llama_vocab_eot(v)) + "/" +
             std::to_string(ours.eotId()) + " add_bos " + std::to_string(llama_vocab_get_add_bos(v)) + "/" +
             std::to_string(ours.addBos()) + " (llama.cpp/jitllm)");
    }
    for (int32_t id = 0; id < ours.vocabSize(); ++id) {
      for (bool special : {true, false}) {
        if (llamaPiece(v, id, special) != ours.tokenPiece(id, special)) {
          report("piece of " + std::to_string(id) + (special ? " (special)" : ""));
        }
      }
      if (llama_vocab_is_eog(v, id) != ours.isEndOfGeneration(id)) {
        report("end of generation: " + std::to_string(id));
      }
      if (llama_vocab_is_control(v, id) != ours.isControl(id)) {
        report("control: " + std::to_string(id));
      }
    }

    std::mt19937 rng(seed);
    for (int i = 0; i < inputs; ++i) {
      std::string text;
      const int count = int(rng() % (i % 10 == 0 ? 200 : 24));
      for (int k = 0; k < count; ++k) text += kPieces[rng() % kPieces.size()];
      if (rng() % 8 == 0) {
        for (int k = int(rng() % 8); k > 0; --k) text += char(rng() % 256);
      }
      for (bool add : {false, true}) {
        for (bool parse : {false, true}) {
          Ids expected;
          try {
            expected = llamaEncode(v, text, add, parse);
          } catch (const std::exception&) {
            ++skipped;
            continue;
          }
          const Ids got = ours.encode(text, add, parse);
          if (got != expected) {
            report("encode add=" + std::to_string(add) + " parse=" + std::to_string(parse) + " of [" + hex(text) + "]");
            continue;
          }
          for (bool remove : {false, true}) {
            for (bool unparse : {false, true}) {
              if (llamaDetokenize(v, expected, remove, unparse) != ours.detokenize(got, remove, unparse)) {
                report("detokenize remove=" + std::to_string(remove) + " unparse=" + std::to_string(unparse) + " of [" +
                       hex(text) + "]");
              }
            }
          }
        }
      }
    }
    std::printf("%s: %d mismatches over %d inputs (%d encodings llama.cpp threw on, skipped)\n", name, bad, inputs,
                skipped);
    totalBad += bad;
    llama_model_free(model);
  }
  return totalBad == 0 ? 0 : 1;
}
