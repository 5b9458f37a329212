#include "engine/tokenizer/streaming_detokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "tests/tokenizer/test_vocab.h"

namespace jitllm::tokenizer {
namespace {

using test_support::loadTokenizer;
using test_support::sharedPath;

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

const Tokenizer& llamaSpm() {
  static const Tokenizer t = loadTokenizer(sharedPath("vocab/ggml-vocab-llama-spm.gguf"));
  return t;
}

int32_t byteToken(uint8_t b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  return llamaSpm().findToken(name);
}

TEST(StreamingDetokenizer, AnEmojiSplitAcrossByteTokensComesOutWholeOnlyWithItsLastByte) {
  StreamingDetokenizer stream(llamaSpm());
  EXPECT_EQ(stream.feed(byteToken(0xF0)), "");
  EXPECT_EQ(stream.feed(byteToken(0x9F)), "");
  EXPECT_EQ(stream.feed(byteToken(0xA6)), "");
  EXPECT_EQ(stream.pendingBytes(), 3u);
  EXPECT_EQ(stream.feed(byteToken(0x99)), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(stream.pendingBytes(), 0u);
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamingDetokenizer, TextBeforeAnUnfinishedCharacterIsNotHeldBack) {
  StreamingDetokenizer stream(llamaSpm());
  EXPECT_EQ(stream.feed(llamaSpm().findToken("\xE2\x96\x81Hello")), " Hello");
  EXPECT_EQ(stream.feed(byteToken(0xC3)), "");
  EXPECT_EQ(stream.feed(byteToken(0xA9)), "\xC3\xA9");
}

TEST(StreamingDetokenizer, BytesThatCanNeverFormACharacterBecomeReplacementsAtOnce) {
  StreamingDetokenizer stream(llamaSpm());
  EXPECT_EQ(stream.feed(byteToken(0xFF)), kReplacement);
  // A lead byte followed by a non-continuation: the lead is replaced, the rest kept.
  EXPECT_EQ(stream.feed(byteToken(0xE2)), "");
  EXPECT_EQ(stream.feed(byteToken('a')), std::string(kReplacement) + "a");
  // Overlong and surrogate encodings are ill-formed too.
  EXPECT_EQ(stream.feed(byteToken(0xC0)), kReplacement);
  EXPECT_EQ(stream.feed(byteToken(0xAF)), kReplacement);
  EXPECT_EQ(stream.feed(byteToken(0xED)), "");
  EXPECT_EQ(stream.feed(byteToken(0xA0)), std::string(kReplacement) + std::string(kReplacement));
}

TEST(StreamingDetokenizer, FlushReplacesAnUnfinishedCharacterWithOneReplacement) {
  StreamingDetokenizer stream(llamaSpm());
  EXPECT_EQ(stream.feed(byteToken(0xF0)), "");
  EXPECT_EQ(stream.feed(byteToken(0x9F)), "");
  EXPECT_EQ(stream.flush(), kReplacement);
  EXPECT_EQ(stream.pendingBytes(), 0u);
  EXPECT_EQ(stream.feed(byteToken('x')), "x");
}

TEST(StreamingDetokenizer, ControlTokensPrintTheirTextUnlessToldNotTo) {
  StreamingDetokenizer rendering(llamaSpm());
  EXPECT_EQ(rendering.feed(2), "</s>");
  StreamingDetokenizer silent(llamaSpm(), {.renderSpecial = false});
  EXPECT_EQ(silent.feed(2), "");
}

TEST(StreamingDetokenizer, ThePrefixSpaceIsKeptLikeLlamaGreedyUnlessStrippingIsAsked) {
  const std::vector<int32_t> ids = llamaSpm().encode("Hello world", true, false);
  std::string kept, stripped;
  StreamingDetokenizer keep(llamaSpm(), {.renderSpecial = false});
  StreamingDetokenizer strip(llamaSpm(), {.renderSpecial = false, .stripPrefixSpace = true});
  for (int32_t id : ids) {
    kept += keep.feed(id);
    stripped += strip.feed(id);
  }
  EXPECT_EQ(kept, " Hello world");
  EXPECT_EQ(stripped, "Hello world");
}

TEST(StreamingDetokenizer, StoriesGreedyOutputStreamsAsLlamaGreedyPrintsIt) {
  const Tokenizer stories = loadTokenizer(sharedPath("models/stories260K.gguf"));
  const std::vector<int32_t> ids = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338};
  StreamingDetokenizer stream(stories);
  std::string text;
  for (int32_t id : ids) text += stream.feed(id);
  text += stream.flush();
  EXPECT_EQ(text, ", there was a little girl named Lily. She");
}

std::vector<std::string> vocabTestInputs(const std::string& name) {
  std::ifstream in(sharedPath("vocab/ggml-vocab-" + name + ".gguf.inp"), std::ios::binary);
  std::ostringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(kSeparator, pos)) != std::string::npos; pos = hit + kSeparator.size()) {
    inputs.push_back(text.substr(pos, hit - pos));
  }
  return inputs;
}

// Every vocabulary splits some of llama.cpp's test inputs (emoji, Khmer, CJK) inside characters;
// streaming their tokens must give only valid chunks that add up to the whole text.
TEST(StreamingDetokenizer, NeverEmitsInvalidUtf8WhileStreamingEveryVocabularysTestInputs) {
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2", "gpt-2"}) {
    const Tokenizer tokenizer = loadTokenizer(sharedPath(std::string("vocab/ggml-vocab-") + name + ".gguf"));
    size_t splitCharacters = 0;
    for (const std::string& input : vocabTestInputs(name)) {
      const std::vector<int32_t> ids = tokenizer.encode(input, false, false);
      StreamingDetokenizer stream(tokenizer);
      std::string streamed, pieces;
      for (int32_t id : ids) {
        const std::string chunk = stream.feed(id);
        EXPECT_TRUE(utf8::isValid(chunk)) << name;
        splitCharacters += !utf8::isValid(tokenizer.tokenPiece(id));
        streamed += chunk;
        pieces += tokenizer.tokenPiece(id);
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, pieces) << name;
    }
    EXPECT_GT(splitCharacters, 0u) << name << ": no token split a character; the test tests nothing";
  }
}

}  // namespace
}  // namespace jitllm::tokenizer
