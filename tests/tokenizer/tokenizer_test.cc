#include "engine/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "tests/tokenizer/test_vocab.h"

namespace jitllm::tokenizer {
namespace {

using test_support::loadTokenizer;
using test_support::sharedPath;
using Ids = std::vector<int32_t>;

const Tokenizer& stories() {
  static const Tokenizer t = loadTokenizer(sharedPath("models/stories260K.gguf"));
  return t;
}
const Tokenizer& llamaSpm() {
  static const Tokenizer t = loadTokenizer(sharedPath("vocab/ggml-vocab-llama-spm.gguf"));
  return t;
}
const Tokenizer& llamaBpe() {
  static const Tokenizer t = loadTokenizer(sharedPath("vocab/ggml-vocab-llama-bpe.gguf"));
  return t;
}
const Tokenizer& qwen2() {
  static const Tokenizer t = loadTokenizer(sharedPath("vocab/ggml-vocab-qwen2.gguf"));
  return t;
}
const Tokenizer& gpt2() {
  static const Tokenizer t = loadTokenizer(sharedPath("vocab/ggml-vocab-gpt-2.gguf"));
  return t;
}

// The ids llama.cpp's llama-greedy generates from BOS + "Once upon a time" (shared/models/README).
const Ids kStoriesGreedy = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
                            410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394,
                            261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
                            398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};
constexpr std::string_view kStoriesGreedyText =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";

TEST(StoriesTokenizer, OnceUponATimeEncodesWithBosAsLlamaCppDoes) {
  EXPECT_EQ(stories().encode("Once upon a time", true, true), (Ids{1, 403, 407, 261, 378}));
}

TEST(StoriesTokenizer, TheGreedyReferenceTokensSpellTheReferenceText) {
  std::string text;
  for (int32_t id : kStoriesGreedy) text += stories().tokenPiece(id);
  EXPECT_EQ(text, kStoriesGreedyText);
}

TEST(StoriesTokenizer, SpecialIdsOutOfRangeInTheFileMeanNoSuchToken) {
  // The file says padding and separator are 4294967295.
  EXPECT_EQ(stories().padId(), kNoToken);
  EXPECT_EQ(stories().bosId(), 1);
  EXPECT_EQ(stories().eosId(), 2);
  EXPECT_EQ(stories().unkId(), 0);
  EXPECT_EQ(stories().vocabSize(), 512);
  EXPECT_TRUE(stories().isEndOfGeneration(2));
  EXPECT_FALSE(stories().isEndOfGeneration(1));
}

TEST(SentencePiece, BosIsAddedOnlyWhenSpecialTokensAreRequested) {
  EXPECT_EQ(llamaSpm().encode("Hello world", true, false), (Ids{1, 15043, 3186}));
  EXPECT_EQ(llamaSpm().encode("Hello world", false, false), (Ids{15043, 3186}));
  EXPECT_EQ(llamaSpm().encode("", true, false), (Ids{1}));
  EXPECT_EQ(llamaSpm().encode("", false, false), (Ids{}));
}

TEST(SentencePiece, ParsedControlTokensSplitTheTextAndRestartTheSpacePrefix) {
  // Text after a special token gets the SentencePiece space prefix again.
  EXPECT_EQ(llamaSpm().encode("<s>Hello", false, true), (Ids{1, 15043}));
  EXPECT_EQ(llamaSpm().encode("Hello</s>", false, true), (Ids{15043, 2}));
  const Ids literal = llamaSpm().encode("<s>Hello", false, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 1), 0);
}

TEST(SentencePiece, UnknownCharactersFallBackToByteTokens) {
  // U+1F999 is not in the 32k vocabulary: four <0xXX> tokens.
  EXPECT_EQ(llamaSpm().encode("\xF0\x9F\xA6\x99", false, false), (Ids{29871, 243, 162, 169, 156}));
  EXPECT_TRUE(llamaSpm().isByte(243));
  EXPECT_EQ(llamaSpm().tokenPiece(243), "\xF0");
}

TEST(SentencePiece, PiecesTurnTheSpaceMarkerIntoASpaceAndRenderControlTokensOnlyWhenAsked) {
  EXPECT_EQ(llamaSpm().tokenPiece(15043), " Hello");
  EXPECT_EQ(llamaSpm().tokenPiece(13), "\n");  // <0x0A>
  EXPECT_EQ(llamaSpm().tokenPiece(1, true), "<s>");
  EXPECT_EQ(llamaSpm().tokenPiece(1, false), "");
  EXPECT_TRUE(llamaSpm().isControl(1));
  EXPECT_TRUE(llamaSpm().isUnknown(0));
}

TEST(SentencePiece, DetokenizeStripsThePrefixSpaceOnlyFromTheFirstTokenAsLlamaCppDoes) {
  EXPECT_EQ(llamaSpm().detokenize(llamaSpm().encode("Hello world", false, false), false, false), "Hello world");
  // llama.cpp only ever strips the first token's piece; after a BOS, the space stays - whether the
  // BOS was removed, rendered or silently skipped.
  const Ids withBos = llamaSpm().encode("Hello world", true, false);
  EXPECT_EQ(llamaSpm().detokenize(withBos, true, false), " Hello world");
  EXPECT_EQ(llamaSpm().detokenize(withBos, false, false), " Hello world");
  EXPECT_EQ(llamaSpm().detokenize(withBos, false, true), "<s> Hello world");
}

TEST(ByteLevelBpe, Llama3AddsBeginOfTextAndParsesItsControlTokens) {
  const int32_t bot = llamaBpe().findToken("<|begin_of_text|>");
  ASSERT_EQ(bot, 128000);
  EXPECT_TRUE(llamaBpe().addBos());
  EXPECT_EQ(llamaBpe().bosId(), 128000);
  const Ids plain = llamaBpe().encode("Hello world", false, false);
  Ids withBos = {bot};
  withBos.insert(withBos.end(), plain.begin(), plain.end());
  EXPECT_EQ(llamaBpe().encode("Hello world", true, false), withBos);
  EXPECT_EQ(llamaBpe().encode("<|begin_of_text|>Hello world", false, true), withBos);
  const Ids literal = llamaBpe().encode("<|begin_of_text|>", false, false);
  EXPECT_GT(literal.size(), 1u);
}

TEST(ByteLevelBpe, EndOfTurnTokensAreRecognisedByText) {
  const int32_t eot = llamaBpe().findToken("<|eot_id|>");
  ASSERT_NE(eot, kNoToken);
  EXPECT_EQ(llamaBpe().eotId(), eot);
  EXPECT_TRUE(llamaBpe().isEndOfGeneration(eot));
  EXPECT_TRUE(llamaBpe().isEndOfGeneration(llamaBpe().eosId()));
  EXPECT_FALSE(llamaBpe().isEndOfGeneration(llamaBpe().bosId()));

  const int32_t imEnd = qwen2().findToken("<|im_end|>");
  ASSERT_NE(imEnd, kNoToken);
  EXPECT_TRUE(qwen2().isEndOfGeneration(imEnd));
  EXPECT_TRUE(qwen2().isControl(imEnd));
  EXPECT_TRUE(qwen2().isEndOfGeneration(qwen2().findToken("<|endoftext|>")));
  EXPECT_FALSE(qwen2().isEndOfGeneration(qwen2().findToken("<|im_start|>")));
}

TEST(ByteLevelBpe, UserDefinedTokensAreMatchedEvenWithoutParsingSpecialTokens) {
  const int32_t pad = qwen2().findToken("[PAD151934]");
  ASSERT_NE(pad, kNoToken);
  ASSERT_TRUE(qwen2().isUserDefined(pad));
  const Ids ids = qwen2().encode("a[PAD151934]b", false, false);
  EXPECT_EQ(ids, (Ids{qwen2().encode("a", false, false)[0], pad, qwen2().encode("b", false, false)[0]}));
  // Control tokens, though, are text unless parsing is asked for.
  const Ids literal = qwen2().encode("<|im_end|>", false, false);
  EXPECT_GT(literal.size(), 1u);
  EXPECT_EQ(qwen2().encode("<|im_end|>", false, true), (Ids{qwen2().findToken("<|im_end|>")}));
}

TEST(ByteLevelBpe, PiecesMapTheByteAlphabetBackToBytes) {
  const int32_t world = gpt2().findToken("\xC4\xA0world");  // "Ġworld"
  ASSERT_NE(world, kNoToken);
  EXPECT_EQ(gpt2().tokenPiece(world), " world");
  EXPECT_FALSE(gpt2().addBos());
  EXPECT_EQ(gpt2().encode("Hello world", true, false), gpt2().encode("Hello world", false, false));
}

TEST(ByteLevelBpe, DetokenizeCleansSpacesBeforePunctuationOnlyWhereTheModelDoes) {
  // GPT-2 and Llama 3 clean up " ," like Hugging Face; Qwen 2 keeps text as it was.
  EXPECT_EQ(gpt2().detokenize(gpt2().encode("a , b", false, false), false, false), "a, b");
  EXPECT_EQ(gpt2().detokenize(gpt2().encode("a ' b it 's", false, false), false, false), "a'b it's");
  EXPECT_EQ(qwen2().detokenize(qwen2().encode("a , b", false, false), false, false), "a , b");
}

TEST(ByteLevelBpe, InvalidUtf8IsReadAsReplacementCharactersLikeLlamaCpp) {
  // llama.cpp decodes a stray byte as U+FFFD before pre-tokenizing, so both spell the same tokens.
  EXPECT_EQ(qwen2().encode("a\xFF"
                           "b",
                           false, false),
            qwen2().encode("a\xEF\xBF\xBD"
                           "b",
                           false, false));
}

TEST(Tokenizer, OutOfRangeIdsAreRejectedWithFailed) {
  try {
    (void)llamaSpm().tokenPiece(32000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
  }
  EXPECT_THROW((void)llamaSpm().tokenPiece(-1), Error);
}

TEST(Tokenizer, AnUnsupportedPreTokenizerIsUnimplementedNotSilentlyWrong) {
  VocabData vocab;
  vocab.model = "gpt2";
  vocab.pre = "deepseek-coder";
  vocab.tokens = {"a", "b"};
  try {
    Tokenizer t(std::move(vocab));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnimplemented);
  }
}

TEST(Tokenizer, AHandBuiltSentencePieceVocabularyMergesByScore) {
  VocabData vocab;
  vocab.model = "llama";
  vocab.tokens = {"<unk>",
                  "<s>",
                  "</s>",
                  "\xE2\x96\x81",
                  "a",
                  "b",
                  "ab",
                  "\xE2\x96\x81"
                  "a",
                  "<0x63>"};
  vocab.scores = {0, 0, 0, -1, -1, -1, -2, -3, 0};
  vocab.tokenTypes = {2, 3, 3, 1, 1, 1, 1, 1, 6};
  Tokenizer t(std::move(vocab));
  // "▁ab": "ab" (-2) outscores "▁a" (-3), so the space stays alone; 'c' exists only as a byte.
  EXPECT_EQ(t.encode("abc", true, false), (Ids{1, 3, 6, 8}));
  EXPECT_EQ(t.detokenize(t.encode("abc", false, false), false, false), "abc");
}

TEST(Tokenizer, TokensFoundByTextBecomeControlTokensAndFimPaddingEndsGeneration) {
  VocabData vocab;
  vocab.model = "gpt2";
  vocab.pre = "qwen2";
  vocab.tokens = {"a", "<|fim_pad|>", "<|im_end|>", "<|im_start|>"};
  vocab.tokenTypes = {1, 1, 1, 3};
  vocab.eosId = 4294967295;  // "none"; the gpt2 default (11) is out of range too
  Tokenizer t(std::move(vocab));
  EXPECT_EQ(t.eosId(), kNoToken);
  EXPECT_EQ(t.eotId(), 2);
  EXPECT_TRUE(t.isControl(1));
  EXPECT_TRUE(t.isEndOfGeneration(1));
  EXPECT_TRUE(t.isEndOfGeneration(2));
  EXPECT_FALSE(t.isEndOfGeneration(3));
  EXPECT_EQ(t.encode("a<|im_end|>", false, true), (Ids{0, 2}));
}

TEST(Tokenizer, AHandBuiltBpeVocabularyAppliesMergesByRank) {
  VocabData vocab;
  vocab.model = "gpt2";
  vocab.pre = "gpt-2";
  vocab.tokens = {"a", "b", "c", "ab", "bc", "abc"};
  vocab.merges = {"b c", "a b", "a bc"};
  Tokenizer t(std::move(vocab));
  // "b c" ranks first, so "abc" becomes a + bc, then "a bc".
  EXPECT_EQ(t.encode("abc", false, false), (Ids{5}));
  EXPECT_EQ(t.encode("ab", false, false), (Ids{3}));
}

}  // namespace
}  // namespace jitllm::tokenizer
