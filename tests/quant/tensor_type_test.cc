#include "kernels/quant/tensor_type.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "kernels/quant/blocks.h"

namespace jitllm::quant {
namespace {

struct Expected {
  TensorType type;
  const char* name;
  int64_t blockElems;
  size_t blockBytes;
  bool computable;
};

// The numbers a GGUF reader depends on, written out independently of the traits table.
constexpr Expected kExpected[] = {
    {TensorType::kF32, "f32", 1, 4, true},
    {TensorType::kF16, "f16", 1, 2, true},
    {TensorType::kQ4_0, "q4_0", 32, 18, true},
    {TensorType::kQ4_1, "q4_1", 32, 20, true},
    {TensorType::kQ5_0, "q5_0", 32, 22, true},
    {TensorType::kQ5_1, "q5_1", 32, 24, true},
    {TensorType::kQ8_0, "q8_0", 32, 34, true},
    {TensorType::kQ8_1, "q8_1", 32, 36, false},
    {TensorType::kQ2_K, "q2_K", 256, 84, false},
    {TensorType::kQ3_K, "q3_K", 256, 110, false},
    {TensorType::kQ4_K, "q4_K", 256, 144, true},
    {TensorType::kQ5_K, "q5_K", 256, 176, true},
    {TensorType::kQ6_K, "q6_K", 256, 210, true},
    {TensorType::kQ8_K, "q8_K", 256, 292, false},
    {TensorType::kIQ2_XXS, "iq2_xxs", 256, 66, false},
    {TensorType::kIQ2_XS, "iq2_xs", 256, 74, false},
    {TensorType::kIQ3_XXS, "iq3_xxs", 256, 98, false},
    {TensorType::kIQ1_S, "iq1_s", 256, 50, false},
    {TensorType::kIQ4_NL, "iq4_nl", 32, 18, false},
    {TensorType::kIQ3_S, "iq3_s", 256, 110, false},
    {TensorType::kIQ2_S, "iq2_s", 256, 82, false},
    {TensorType::kIQ4_XS, "iq4_xs", 256, 136, false},
    {TensorType::kI8, "i8", 1, 1, false},
    {TensorType::kI16, "i16", 1, 2, false},
    {TensorType::kI32, "i32", 1, 4, false},
    {TensorType::kI64, "i64", 1, 8, false},
    {TensorType::kF64, "f64", 1, 8, false},
    {TensorType::kIQ1_M, "iq1_m", 256, 56, false},
    {TensorType::kBF16, "bf16", 1, 2, true},
    {TensorType::kTQ1_0, "tq1_0", 256, 54, false},
    {TensorType::kTQ2_0, "tq2_0", 256, 66, false},
    {TensorType::kMXFP4, "mxfp4", 32, 17, false},
};

TEST(TensorType, EveryGgmlTypeHasGgmlsBlockSizeBytesAndName) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    const TypeTraits t = typeTraits(e.type);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.blockElems, e.blockElems);
    EXPECT_EQ(t.blockBytes, e.blockBytes);
    EXPECT_EQ(t.computable, e.computable);
    EXPECT_EQ(typeName(e.type), e.name);
    std::optional<TypeTraits> raw = typeTraits(static_cast<uint32_t>(e.type));
    ASSERT_TRUE(raw.has_value());
    EXPECT_EQ(raw->blockBytes, e.blockBytes);
  }
}

TEST(TensorType, BlockStructsHaveTheSizesTheTraitsTableClaims) {
  EXPECT_EQ(sizeof(block_q4_0), typeTraits(TensorType::kQ4_0).blockBytes);
  EXPECT_EQ(sizeof(block_q4_1), typeTraits(TensorType::kQ4_1).blockBytes);
  EXPECT_EQ(sizeof(block_q5_0), typeTraits(TensorType::kQ5_0).blockBytes);
  EXPECT_EQ(sizeof(block_q5_1), typeTraits(TensorType::kQ5_1).blockBytes);
  EXPECT_EQ(sizeof(block_q8_0), typeTraits(TensorType::kQ8_0).blockBytes);
  EXPECT_EQ(sizeof(block_q2_K), typeTraits(TensorType::kQ2_K).blockBytes);
  EXPECT_EQ(sizeof(block_q3_K), typeTraits(TensorType::kQ3_K).blockBytes);
  EXPECT_EQ(sizeof(block_q4_K), typeTraits(TensorType::kQ4_K).blockBytes);
  EXPECT_EQ(sizeof(block_q5_K), typeTraits(TensorType::kQ5_K).blockBytes);
  EXPECT_EQ(sizeof(block_q6_K), typeTraits(TensorType::kQ6_K).blockBytes);
}

TEST(TensorType, NumbersGgmlLeavesUnusedHaveNoTraits) {
  for (uint32_t raw : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) {
    EXPECT_FALSE(typeTraits(raw).has_value()) << raw;
  }
}

TEST(TensorType, RowBytesCountsWholeBlocksAndRejectsPartialOnes) {
  EXPECT_EQ(rowBytes(TensorType::kF32, 7), 28u);
  EXPECT_EQ(rowBytes(TensorType::kF16, 3), 6u);
  EXPECT_EQ(rowBytes(TensorType::kQ8_0, 64), 68u);
  EXPECT_EQ(rowBytes(TensorType::kQ4_K, 4096), 16u * 144u);
  EXPECT_EQ(rowBytes(TensorType::kQ6_K, 256), 210u);
  EXPECT_EQ(rowBytes(TensorType::kQ4_0, 0), 0u);
  EXPECT_FALSE(rowBytes(TensorType::kQ4_0, 33).has_value());
  EXPECT_FALSE(rowBytes(TensorType::kQ4_K, 128).has_value());
  EXPECT_FALSE(rowBytes(TensorType::kF32, -1).has_value());
}

TEST(TensorType, NamesParseInEitherCaseAndUnknownNamesDoNot) {
  EXPECT_EQ(parseTypeName("q4_K"), TensorType::kQ4_K);
  EXPECT_EQ(parseTypeName("Q4_K"), TensorType::kQ4_K);
  EXPECT_EQ(parseTypeName("q4_k"), TensorType::kQ4_K);
  EXPECT_EQ(parseTypeName("BF16"), TensorType::kBF16);
  EXPECT_EQ(parseTypeName("iq2_xxs"), TensorType::kIQ2_XXS);
  EXPECT_FALSE(parseTypeName("q4").has_value());
  EXPECT_FALSE(parseTypeName("").has_value());
  EXPECT_FALSE(parseTypeName("q4_K ").has_value());
  for (const Expected& e : kExpected) EXPECT_EQ(parseTypeName(e.name), e.type) << e.name;
}

}  // namespace
}  // namespace jitllm::quant
