#include "engine/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"

namespace jitllm::tokenizer {
namespace {

std::vector<std::string> words(PreTokenizerKind kind, std::string_view text) {
  std::vector<uint32_t> cps;
  utf8::decodeLenient(text, cps);
  std::vector<size_t> lengths;
  splitWords(kind, cps, lengths);
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t len : lengths) {
    std::string& word = out.emplace_back();
    for (size_t i = begin; i < begin + len; ++i) utf8::append(word, cps[i]);
    begin += len;
  }
  EXPECT_EQ(begin, cps.size());
  return out;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndKeepsAPunctuationPrefixOnWords) {
  EXPECT_EQ(words(PreTokenizerKind::kLlama3, "Hello world 1234567"),
            (Words{"Hello", " world", " ", "123", "456", "7"}));
  EXPECT_EQ(words(PreTokenizerKind::kLlama3, "(hello) I'M"), (Words{"(hello", ")", " I", "'M"}));
}

TEST(PreTokenizer, Qwen2TakesDigitsOneAtATime) {
  EXPECT_EQ(words(PreTokenizerKind::kQwen2, "x 123"), (Words{"x", " ", "1", "2", "3"}));
}

// refact / starcoder: \p{N} first, so a space before a number stays a word of its own.
TEST(PreTokenizer, DigitsThenGpt2SplitsEveryDigitBeforeTheGpt2Regex) {
  EXPECT_EQ(words(PreTokenizerKind::kDigitsThenGpt2, "x 123 it's"), (Words{"x", " ", "1", "2", "3", " it", "'s"}));
  EXPECT_EQ(words(PreTokenizerKind::kDigitsThenGpt2, "v2.0"), (Words{"v", "2", ".", "0"}));
}

TEST(PreTokenizer, Gpt2ContractionsAreCaseSensitiveAndSpacesPrefixTheNextWord) {
  EXPECT_EQ(words(PreTokenizerKind::kGpt2, "it's IT'S"), (Words{"it", "'s", " IT", "'", "S"}));
  EXPECT_EQ(words(PreTokenizerKind::kGpt2, "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(words(PreTokenizerKind::kGpt2, "a  "), (Words{"a", "  "}));
}

TEST(PreTokenizer, Llama3KeepsLineBreaksWithTheWhitespaceBeforeThem) {
  EXPECT_EQ(words(PreTokenizerKind::kLlama3, "a \n\n  b"), (Words{"a", " \n\n", " ", " b"}));
  EXPECT_EQ(words(PreTokenizerKind::kLlama3, "x!!\n\ny"), (Words{"x", "!!\n\n", "y"}));
}

// Expected words: llama.cpp's unicode_regex_split with its gpt-4o pattern, on the same texts.
TEST(PreTokenizer, Gpt4oSplitsAtCaseChangesAndKeepsContractionsOnTheirWord) {
  EXPECT_EQ(words(PreTokenizerKind::kGpt4o, "HelloWorld ABCdef x://a/b\n"),
            (Words{"Hello", "World", " ABCdef", " x", "://", "a", "/b", "\n"}));
  EXPECT_EQ(words(PreTokenizerKind::kGpt4o, "'s 'LL it'S don'T"), (Words{"'s", " '", "LL", " it'S", " don'T"}));
  EXPECT_EQ(words(PreTokenizerKind::kGpt4o, "12345 WORLD"), (Words{"123", "45", " WORLD"}));
  EXPECT_EQ(words(PreTokenizerKind::kGpt4o, "  x\n\n y"), (Words{" ", " x", "\n\n", " y"}));
}

// llama.cpp's rewrite counts a letter outside ASCII as upper and lower case at once, and a
// combining mark as no letter.
TEST(PreTokenizer, Gpt4oTreatsNonAsciiLettersAsBothCasesAndMarksAsPunctuation) {
  EXPECT_EQ(words(PreTokenizerKind::kGpt4o,
                  "Hello WORLD \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"
                  "ABC"),
            (Words{"Hello", " WORLD", " \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "ABC"}));
  EXPECT_EQ(words(PreTokenizerKind::kGpt4o, "caf\xC3\xA9 e\xCC\x81t\xC3\xA9 \xF0\x9F\x98\x80!!\n\n1"),
            (Words{"caf\xC3\xA9", " e", "\xCC\x81t\xC3\xA9", " \xF0\x9F\x98\x80!!\n\n", "1"}));
}

TEST(PreTokenizer, NonAsciiLettersNumbersAndWhitespaceFollowUnicodeCategories) {
  // U+00E9 is a letter, U+0663 an Arabic-Indic digit, U+3000 an ideographic space.
  EXPECT_EQ(words(PreTokenizerKind::kGpt2, "caf\xC3\xA9 \xD9\xA3\xE3\x80\x80x"),
            (Words{"caf\xC3\xA9", " \xD9\xA3", "\xE3\x80\x80", "x"}));
}

TEST(PreTokenizer, TheDefaultChainSplitsPunctuationRunsAndDigitTriples) {
  EXPECT_EQ(words(PreTokenizerKind::kDefault, "a+=b 12345"), (Words{"a", "+=", "b", " ", "123", "45"}));
}

}  // namespace
}  // namespace jitllm::tokenizer
