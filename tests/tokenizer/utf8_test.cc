#include "engine/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/tokenizer/codepoint_class.h"
#include "engine/tokenizer/gpt2_byte_map.h"

namespace jitllm::tokenizer {
namespace {

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> cps;
  utf8::decodeLenient(s, cps);
  return cps;
}

TEST(Utf8, LenientDecodingReplacesEachUnstartableByteLikeLlamaCpp) {
  EXPECT_EQ(decode("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(decode("\x80z"), (std::vector<uint32_t>{0xFFFD, 'z'}));
  EXPECT_EQ(decode("\xE2\x82"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  // Overlong forms are accepted as llama.cpp accepts them.
  EXPECT_EQ(decode("\xC0\xAF"), (std::vector<uint32_t>{'/'}));
}

TEST(Utf8, StrictCheckingRejectsOverlongsSurrogatesAndValuesPastTheLastCodePoint) {
  size_t len = 0;
  EXPECT_EQ(utf8::checkSequence("\xC0\xAF", &len), utf8::SequenceStatus::kInvalid);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(utf8::checkSequence("\xED\xA0\x80", &len), utf8::SequenceStatus::kInvalid);
  EXPECT_EQ(utf8::checkSequence("\xF4\x90\x80\x80", &len), utf8::SequenceStatus::kInvalid);
  EXPECT_EQ(utf8::checkSequence("\xF0\x9F\xA6", &len), utf8::SequenceStatus::kIncomplete);
  EXPECT_EQ(utf8::checkSequence("\xF0\x9F\xA6\x99", &len), utf8::SequenceStatus::kComplete);
  EXPECT_EQ(len, 4u);
  EXPECT_TRUE(utf8::isValid("caf\xC3\xA9 \xF0\x9F\xA6\x99"));
  EXPECT_FALSE(utf8::isValid("\xF0\x9F\xA6"));
}

TEST(Utf8, EncodingRoundTripsEveryScalarValueAndReplacesTheRest) {
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    utf8::append(s, cp);
    EXPECT_EQ(decode(s), (std::vector<uint32_t>{cp}));
  }
  std::string s;
  utf8::append(s, 0x110000);
  EXPECT_EQ(s, "\xEF\xBF\xBD");
}

TEST(Gpt2ByteMap, SpaceAndNewlineMapToTheLettersTheVocabulariesUse) {
  EXPECT_EQ(gpt2_bytes::encodeByte(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(gpt2_bytes::encodeByte('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(gpt2_bytes::encodeByte('a'), "a");
  for (int b = 0; b < 256; ++b) {
    const std::vector<uint32_t> cps = decode(gpt2_bytes::encodeByte(uint8_t(b)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(gpt2_bytes::decodeCodepoint(cps[0]), b);
  }
  EXPECT_EQ(gpt2_bytes::decodeCodepoint(0x2581), -1);
}

TEST(CodepointClass, TablesAgreeWithUnicodeOnSampleCodePoints) {
  EXPECT_EQ(codepointClass('A'), CodepointClass::kLetter);
  EXPECT_EQ(codepointClass('7'), CodepointClass::kNumber);
  EXPECT_EQ(codepointClass('!'), CodepointClass::kPunctuation);
  EXPECT_EQ(codepointClass('$'), CodepointClass::kSymbol);
  EXPECT_EQ(codepointClass(0x4E2D), CodepointClass::kLetter);   // CJK
  EXPECT_EQ(codepointClass(0x0301), CodepointClass::kMark);     // combining acute
  EXPECT_EQ(codepointClass(0x1F999), CodepointClass::kSymbol);  // emoji
  EXPECT_EQ(codepointClass(0x10FFFF), CodepointClass::kUnassigned);
  EXPECT_EQ(codepointClass(0x110000), CodepointClass::kUnassigned);
  EXPECT_TRUE(isWhitespace(0x85));
  EXPECT_TRUE(isWhitespace(0x3000));
  EXPECT_FALSE(isWhitespace(0x1C));  // Python's isspace says yes; White_Space says no
  EXPECT_FALSE(isWhitespace(0x200B));
}

}  // namespace
}  // namespace jitllm::tokenizer
