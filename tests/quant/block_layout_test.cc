// Hand-built blocks with values worked out by hand from ggml's layout. Each test pins down one
// layout fact (nibble order, where the fifth / sixth bits live, how 6-bit scales are packed) that
// a round-trip test alone could not: an encoder and decoder that agree on a wrong layout would
// still round-trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/half.h"

namespace jitllm::quant {
namespace {

constexpr uint16_t kHalfOne = 0x3c00;       // 1.0
constexpr uint16_t kHalfHalf = 0x3800;      // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;   // 0.25
constexpr uint16_t kHalfMinusOne = 0xbc00;  // -1.0

template <class Block>
std::vector<float> decode(TensorType type, const Block& b, int n) {
  std::vector<float> out(size_t(n), NAN);
  dequantizeRow(type, &b, out.data(), n);
  return out;
}

TEST(BlockLayout, Q4_0KeepsElementJInTheLowNibbleOfByteJAndElementJPlus16InTheHighNibble) {
  block_q4_0 b{};
  b.d = kHalfHalf;
  b.qs[0] = 0x93;   // element 0: 3, element 16: 9
  b.qs[15] = 0x0f;  // element 15: 15, element 31: 0
  const auto y = decode(TensorType::kQ4_0, b, 32);
  EXPECT_EQ(y[0], (3 - 8) * 0.5f);
  EXPECT_EQ(y[16], (9 - 8) * 0.5f);
  EXPECT_EQ(y[15], (15 - 8) * 0.5f);
  EXPECT_EQ(y[31], (0 - 8) * 0.5f);
  EXPECT_EQ(y[1], -4.0f);  // nibble 0
}

TEST(BlockLayout, Q4_1AddsTheMinToQuantTimesScale) {
  block_q4_1 b{};
  b.d = kHalfQuarter;
  b.m = kHalfMinusOne;
  b.qs[2] = 0xa5;  // element 2: 5, element 18: 10
  const auto y = decode(TensorType::kQ4_1, b, 32);
  EXPECT_EQ(y[2], 5 * 0.25f - 1);
  EXPECT_EQ(y[18], 10 * 0.25f - 1);
  EXPECT_EQ(y[0], -1.0f);
}

TEST(BlockLayout, Q5_0TakesTheFifthBitOfElementJFromBitJOfLittleEndianQh) {
  block_q5_0 b{};
  b.d = kHalfOne;
  const uint32_t qh = (1u << 0) | (1u << 17) | (1u << 31);
  std::memcpy(b.qh, &qh, 4);
  b.qs[0] = 0x21;   // element 0: 1 | 16, element 16: 2
  b.qs[1] = 0x43;   // element 1: 3, element 17: 4 | 16
  b.qs[15] = 0x7f;  // element 15: 15, element 31: 7 | 16
  const auto y = decode(TensorType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], float(17 - 16));
  EXPECT_EQ(y[16], float(2 - 16));
  EXPECT_EQ(y[1], float(3 - 16));
  EXPECT_EQ(y[17], float(20 - 16));
  EXPECT_EQ(y[15], float(15 - 16));
  EXPECT_EQ(y[31], float(23 - 16));
}

TEST(BlockLayout, Q5_1UsesTheSameBitsAsQ5_0WithAMinInsteadOfAnOffset) {
  block_q5_1 b{};
  b.d = kHalfHalf;
  b.m = kHalfOne;
  const uint32_t qh = 1u << 20;
  std::memcpy(b.qh, &qh, 4);
  b.qs[4] = 0xf1;  // element 4: 1, element 20: 15 | 16
  const auto y = decode(TensorType::kQ5_1, b, 32);
  EXPECT_EQ(y[4], 1 * 0.5f + 1);
  EXPECT_EQ(y[20], 31 * 0.5f + 1);
  EXPECT_EQ(y[5], 1.0f);
}

TEST(BlockLayout, Q8_0IsSignedBytesTimesScale) {
  block_q8_0 b{};
  b.d = kHalfQuarter;
  b.qs[0] = -128;
  b.qs[1] = 127;
  b.qs[31] = -3;
  const auto y = decode(TensorType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[1], 31.75f);
  EXPECT_EQ(y[31], -0.75f);
  EXPECT_EQ(y[2], 0.0f);
}

// Scales and mins of 8 sub-blocks, chosen so that sub-blocks 4..7 need their top two bits.
constexpr uint8_t kSc[8] = {1, 2, 3, 63, 17, 33, 49, 62};
constexpr uint8_t kMn[8] = {5, 0, 7, 9, 48, 21, 63, 16};

// The 12 scale bytes as ggml lays them out, written without the code under test.
void packScalesByHand(uint8_t* s) {
  for (int j = 0; j < 4; j++) {
    s[j] = uint8_t(kSc[j] | ((kSc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(kMn[j] | ((kMn[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((kSc[j + 4] & 0xF) | ((kMn[j + 4] & 0xF) << 4));
  }
}

TEST(BlockLayout, KQuantScalesUnpackAsGgmlsGetScaleMinK4AndPackInverts) {
  uint8_t byHand[12];
  packScalesByHand(byHand);
  uint8_t packed[12] = {};
  for (int s = 0; s < 8; s++) packScaleMinK4(s, kSc[s], kMn[s], packed);
  EXPECT_EQ(std::memcmp(byHand, packed, 12), 0);
  for (int s = 0; s < 8; s++) {
    uint8_t sc, mn;
    unpackScaleMinK4(s, byHand, &sc, &mn);
    EXPECT_EQ(sc, kSc[s]) << s;
    EXPECT_EQ(mn, kMn[s]) << s;
  }
}

TEST(BlockLayout, Q4_KPairsSubBlocksInTheLowAndHighNibblesOf32Bytes) {
  block_q4_K b{};
  b.d = kHalfHalf;
  b.dmin = kHalfQuarter;
  packScalesByHand(b.scales);
  b.qs[0] = 0x3a;       // element 0 (sub 0): 10, element 32 (sub 1): 3
  b.qs[31] = 0xf1;      // element 31 (sub 0): 1, element 63 (sub 1): 15
  b.qs[96 + 5] = 0x7c;  // element 197 (sub 6): 12, element 229 (sub 7): 7
  const auto y = decode(TensorType::kQ4_K, b, 256);
  auto value = [](int sub, int q) { return 0.5f * kSc[sub] * float(q) - 0.25f * kMn[sub]; };
  EXPECT_EQ(y[0], value(0, 10));
  EXPECT_EQ(y[0], 0.5f * 1 * 10 - 1.25f);
  EXPECT_EQ(y[32], value(1, 3));
  EXPECT_EQ(y[31], value(0, 1));
  EXPECT_EQ(y[63], value(1, 15));
  EXPECT_EQ(y[197], value(6, 12));
  EXPECT_EQ(y[197], 0.5f * 49 * 12 - 0.25f * 63);
  EXPECT_EQ(y[229], value(7, 7));
  EXPECT_EQ(y[100], value(3, 0));  // a zero nibble decodes to -min
}

TEST(BlockLayout, Q5_KTakesTheFifthBitOfPairPFromBits2PAnd2PPlus1OfQh) {
  block_q5_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  packScalesByHand(b.scales);
  b.qs[0] = 0x21;        // element 0: 1, element 32: 2
  b.qh[0] = 0x03;        // both get the fifth bit (pair 0)
  b.qs[32 + 7] = 0x54;   // element 71 (sub 2): 4, element 103 (sub 3): 5
  b.qh[7] = 0x08;        // only element 103 (bit 3 = pair 1, high half) gets it
  b.qs[96 + 31] = 0x99;  // element 223 (sub 6): 9, element 255 (sub 7): 9
  b.qh[31] = 0x40;       // bit 6 = pair 3, low half: element 223
  const auto y = decode(TensorType::kQ5_K, b, 256);
  auto value = [](int sub, int q) { return 1.0f * kSc[sub] * float(q) - 0.5f * kMn[sub]; };
  EXPECT_EQ(y[0], value(0, 17));
  EXPECT_EQ(y[32], value(1, 18));
  EXPECT_EQ(y[71], value(2, 4));
  EXPECT_EQ(y[103], value(3, 21));
  EXPECT_EQ(y[223], value(6, 25));
  EXPECT_EQ(y[255], value(7, 9));
}

TEST(BlockLayout, Q6_KSplitsEachHalfInto4QuartersSharingQlNibblesAndQhBitPairs) {
  block_q6_K b{};
  b.d = kHalfHalf;
  for (int s = 0; s < 16; s++) b.scales[s] = int8_t(s - 5);
  // Half 0, l = 0: quarters get q = 1 | 0<<4, 3 | 1<<4, 2 | 2<<4, 4 | 3<<4.
  b.ql[0] = 0x21;
  b.ql[32] = 0x43;
  b.qh[0] = 0b11100100;
  // Half 1, l = 17: element 128+17 gets 15 | 3<<4 = 63 (the largest), others 0.
  b.ql[64 + 17] = 0x0f;
  b.qh[32 + 17] = 0x03;
  const auto y = decode(TensorType::kQ6_K, b, 256);
  EXPECT_EQ(y[0], 0.5f * float(0 - 5) * float(1 - 32));
  EXPECT_EQ(y[32], 0.5f * float(2 - 5) * float(19 - 32));
  EXPECT_EQ(y[64], 0.5f * float(4 - 5) * float(34 - 32));
  EXPECT_EQ(y[96], 0.5f * float(6 - 5) * float(52 - 32));
  EXPECT_EQ(y[145], 0.5f * float(9 - 5) * float(63 - 32));  // sub-block 8 + 1
  EXPECT_EQ(y[1], 0.5f * float(0 - 5) * float(0 - 32));     // all-zero quant is -32
  EXPECT_EQ(y[255], 0.5f * float(15 - 5) * float(0 - 32));
}

TEST(Dequantize, RejectsRowsThatAreNotWholeBlocksAndTypesItCannotCompute) {
  float out[64];
  block_q4_0 b[2]{};
  EXPECT_THROW(dequantizeRow(TensorType::kQ4_0, b, out, 33), Error);
  EXPECT_THROW(dequantizeRow(TensorType::kIQ2_XXS, b, out, 256), Error);
  try {
    dequantizeRow(TensorType::kQ2_K, b, out, 256);
    FAIL() << "q2_K is not computable yet";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnimplemented);
  }
}

}  // namespace
}  // namespace jitllm::quant
