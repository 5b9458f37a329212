// The GGUF reader and writer: every value type round-trips, real files parse, and every kind of
// malformed file is refused with an Error naming the file and the problem.
#include "engine/gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "engine/gguf/gguf_writer.h"

namespace jitllm::gguf {
namespace {

using quant::TensorType;

std::vector<uint8_t> f32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A small valid file: a few keys and two tensors.
GgufWriter sampleWriter(uint32_t version = 3, uint32_t alignment = 32) {
  GgufWriter w(version, alignment);
  w.set("general.architecture", Value::string("llama"));
  w.set("answer", Value::u32(42));
  w.set("tokens", Value::stringArray({"a", "bb", "ccc"}));
  w.addTensor("first", TensorType::kF32, {4, 2}, f32Bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.addTensor("second", TensorType::kF32, {3}, f32Bytes({9, 10, 11}));
  return w;
}

// Expects parsing to fail with an Error(FAILED) whose message names the file and contains `what`.
void expectRejected(const std::vector<uint8_t>& bytes, const std::string& what) {
  try {
    GgufFile::fromBytes(bytes, "hostile.gguf");
    ADD_FAILURE() << "accepted a file that should fail with: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailed);
    EXPECT_NE(std::string(e.what()).find("hostile.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Offset of the first occurrence of a string's bytes in the file.
size_t findBytes(const std::vector<uint8_t>& bytes, const std::string& s) {
  auto it = std::search(bytes.begin(), bytes.end(), s.begin(), s.end());
  EXPECT_NE(it, bytes.end()) << s;
  return size_t(it - bytes.begin());
}

TEST(GgufFile, EveryValueTypeRoundTripsThroughTheWriter) {
  GgufWriter w;
  w.set("u8", Value::u8(200));
  w.set("i8", Value::i8(-100));
  w.set("u16", Value::u16(60000));
  w.set("i16", Value::i16(-30000));
  w.set("u32", Value::u32(4000000000u));
  w.set("i32", Value::i32(-2000000000));
  w.set("u64", Value::u64(18000000000000000000ull));
  w.set("i64", Value::i64(-9000000000000000000ll));
  w.set("f32", Value::f32(1.5f));
  w.set("f64", Value::f64(-2.25));
  w.set("bool", Value::boolean(true));
  w.set("string", Value::string(std::string("with\0nul", 8)));
  w.set("ints", Value::i32Array({1, -2, 3}));
  w.set("floats", Value::f32Array({0.5f, -1.0f}));
  w.set("nested", Value::array(ValueType::kArray, {Value::stringArray({"x"}), Value::stringArray({"y", "z"})}));
  w.set("empty", Value::array(ValueType::kUint8, {}));
  auto f = GgufFile::fromBytes(w.serialize(), "roundtrip.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(f->find("u8")->asUint(), 200u);
  EXPECT_EQ(f->find("i8")->asInt(), -100);
  EXPECT_EQ(f->find("u16")->asUint(), 60000u);
  EXPECT_EQ(f->find("i16")->asInt(), -30000);
  EXPECT_EQ(f->getU32("u32"), 4000000000u);
  EXPECT_EQ(f->getInt("i32"), -2000000000);
  EXPECT_EQ(f->find("u64")->asUint(), 18000000000000000000ull);
  EXPECT_EQ(f->getInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(f->getFloat("f32"), 1.5);
  EXPECT_EQ(f->getFloat("f64"), -2.25);
  EXPECT_EQ(f->getBool("bool"), true);
  EXPECT_EQ(f->getString("string"), std::string("with\0nul", 8));
  EXPECT_EQ(f->getI32Array("ints"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f->getF32Array("floats"), (std::vector<float>{0.5f, -1.0f}));
  const Array* nested = f->find("nested")->asArray();
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ(nested->at(1).asArray()->at(1).asString()[0], "z");
  EXPECT_EQ(f->find("empty")->asArray()->size(), 0u);
  EXPECT_EQ(f->find("metadata order"), nullptr);
  EXPECT_EQ(f->metadata()[0].first, "u8");  // file order is kept
}

TEST(GgufFile, TensorsKeepTheirShapeTypeAndBytesAtTheRequestedAlignment) {
  for (uint32_t alignment : {32u, 64u, 256u}) {
    for (uint32_t version : {2u, 3u}) {
      auto f = GgufFile::fromBytes(sampleWriter(version, alignment).serialize(), "t.gguf");
      EXPECT_EQ(f->version(), version);
      EXPECT_EQ(f->alignment(), alignment);
      EXPECT_EQ(f->dataOffset() % alignment, 0u);
      const TensorInfo* t = f->findTensor("first");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->dims, (std::vector<int64_t>{4, 2}));
      EXPECT_EQ(t->rows(), 2);
      EXPECT_EQ(t->nbytes, 32u);
      EXPECT_EQ(reinterpret_cast<const float*>(t->data)[5], 6.0f);
      const TensorInfo* s = f->findTensor("second");
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->offset % alignment, 0u);
      EXPECT_EQ(reinterpret_cast<const float*>(s->data)[2], 11.0f);
    }
  }
}

TEST(GgufFile, Stories260KParsesWithItsRealMetadataAndTensors) {
  const std::string path = std::string(JITLLM_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->getString("general.architecture"), "llama");
  EXPECT_EQ(f->getU32("llama.block_count"), 5u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->getStringArray("tokenizer.ggml.tokens")->size(), 512u);
  const TensorInfo* embd = f->findTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(embd->type, TensorType::kF32);
}

TEST(GgufFile, TypedGettersNameTheKeyWhenTheTypeIsWrong) {
  auto f = GgufFile::fromBytes(sampleWriter().serialize(), "types.gguf");
  EXPECT_EQ(f->getString("missing"), std::nullopt);
  try {
    f->getString("answer");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'answer'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("types.gguf"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f->getU32("tokens"), Error);
  EXPECT_THROW(f->getF32Array("tokens"), Error);
  EXPECT_THROW(f->getBool("answer"), Error);
}

TEST(GgufFile, EveryTruncationOfAValidFileIsRefusedCleanly) {
  const std::vector<uint8_t> whole = sampleWriter().serialize();
  // The padding after the last tensor is optional; every byte before its end is needed.
  auto f = GgufFile::fromBytes(whole, "whole.gguf");
  const TensorInfo* last = f->findTensor("second");
  const size_t needed = f->dataOffset() + last->offset + last->nbytes;
  ASSERT_LT(needed, whole.size());
  EXPECT_NO_THROW(GgufFile::fromBytes(std::vector<uint8_t>(whole.begin(), whole.begin() + long(needed)), "n"));
  for (size_t n = 0; n < needed; n++) {
    std::vector<uint8_t> cut(whole.begin(), whole.begin() + long(n));
    EXPECT_THROW(GgufFile::fromBytes(cut, "cut.gguf"), Error) << "length " << n;
  }
}

TEST(GgufFile, WrongMagicAndUnsupportedVersionsAreRefused) {
  std::vector<uint8_t> bytes = sampleWriter().serialize();
  auto bad = bytes;
  bad[0] = 'X';
  expectRejected(bad, "bad magic");
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    bad = bytes;
    poke<uint32_t>(bad, 4, v);
    expectRejected(bad, "version");
  }
}

TEST(GgufFile, AbsurdCountsAndLengthsAreRefusedWithoutAllocating) {
  const std::vector<uint8_t> bytes = sampleWriter().serialize();
  auto bad = bytes;
  poke<uint64_t>(bad, 8, uint64_t(1) << 60);  // tensor count
  expectRejected(bad, "tensor count");
  bad = bytes;
  poke<uint64_t>(bad, 16, uint64_t(1) << 60);  // metadata count
  expectRejected(bad, "metadata count");
  bad = bytes;
  poke<uint64_t>(bad, 24, uint64_t(1) << 62);  // length of the first key
  expectRejected(bad, "truncated metadata key");
  // The string array's element count.
  bad = bytes;
  const size_t tokensKey = findBytes(bad, "tokens");
  poke<uint64_t>(bad, tokensKey + 6 + 4 + 4, uint64_t(1) << 61);
  expectRejected(bad, "more than the file holds");
}

TEST(GgufFile, UnknownValueTypesAndBadBoolsAreRefused) {
  GgufWriter w;
  w.set("flag", Value::boolean(true));
  auto bytes = w.serialize();
  auto bad = bytes;
  const size_t key = findBytes(bad, "flag");
  poke<uint32_t>(bad, key + 4, 13);
  expectRejected(bad, "unknown value type 13");
  bad = bytes;
  bad[key + 4 + 4] = 2;
  expectRejected(bad, "neither 0 nor 1");
}

TEST(GgufFile, ArraysNestedDeeperThanTheLimitAreRefused) {
  Value v = Value::stringArray({"leaf"});
  for (int i = 0; i < kMaxArrayDepth; i++) v = Value::array(ValueType::kArray, {v});
  GgufWriter w;
  w.set("deep", v);
  expectRejected(w.serialize(), "nests arrays too deeply");
}

TEST(GgufFile, DuplicateKeysAndTensorNamesAreRefused) {
  GgufWriter w;
  w.set("aaaa", Value::u32(1));
  w.set("bbbb", Value::u32(2));
  auto bytes = w.serialize();
  std::memcpy(bytes.data() + findBytes(bytes, "bbbb"), "aaaa", 4);
  expectRejected(bytes, "duplicate metadata key 'aaaa'");

  GgufWriter t;
  t.addTensor("xxxx", TensorType::kF32, {1}, f32Bytes({1}));
  t.addTensor("yyyy", TensorType::kF32, {1}, f32Bytes({2}));
  bytes = t.serialize();
  std::memcpy(bytes.data() + findBytes(bytes, "yyyy"), "xxxx", 4);
  expectRejected(bytes, "duplicate tensor name 'xxxx'");
}

// Byte offsets inside the tensor info of the tensor named `name` (dims start after n_dims).
struct TensorInfoAt {
  size_t nDims, firstDim, type, offset;
};
TensorInfoAt tensorInfoAt(const std::vector<uint8_t>& bytes, const std::string& name, int dims) {
  const size_t at = findBytes(bytes, name) + name.size();
  return {at, at + 4, at + 4 + 8 * size_t(dims), at + 4 + 8 * size_t(dims) + 4};
}

TEST(GgufFile, TensorInfosWithBadShapesTypesOrOffsetsAreRefused) {
  const auto bytes = sampleWriter().serialize();
  const TensorInfoAt first = tensorInfoAt(bytes, "first", 2);
  auto bad = bytes;
  poke<uint32_t>(bad, first.nDims, 5);
  expectRejected(bad, "5 dimensions");
  bad = bytes;
  poke<uint64_t>(bad, first.firstDim, 0);
  expectRejected(bad, "of size 0");
  bad = bytes;
  poke<uint64_t>(bad, first.firstDim, uint64_t(1) << 62);
  poke<uint64_t>(bad, first.firstDim + 8, uint64_t(1) << 62);
  expectRejected(bad, "overflows");
  bad = bytes;
  poke<uint32_t>(bad, first.type, 31);  // a hole in ggml's numbering
  expectRejected(bad, "unknown tensor type 31");
  bad = bytes;
  poke<uint32_t>(bad, first.type, uint32_t(TensorType::kQ4_0));  // row of 4 is not a block of 32
  expectRejected(bad, "not a multiple of its block size");
  bad = bytes;
  poke<uint64_t>(bad, first.offset, 4);
  expectRejected(bad, "not a multiple of the alignment");
  bad = bytes;
  poke<uint64_t>(bad, first.offset, 1 << 20);
  expectRejected(bad, "lies outside");
  bad = bytes;
  const TensorInfoAt second = tensorInfoAt(bytes, "second", 1);
  poke<uint64_t>(bad, second.offset, 0);  // on top of "first"
  expectRejected(bad, "overlap");
}

TEST(GgufFile, AlignmentMustBeAPowerOfTwoUint32) {
  auto bytes = sampleWriter(3, 64).serialize();
  const size_t key = findBytes(bytes, "general.alignment");
  auto bad = bytes;
  poke<uint32_t>(bad, key + 17 + 4, 48);
  expectRejected(bad, "not a power of two");
  bad = bytes;
  poke<uint32_t>(bad, key + 17 + 4, 0);
  expectRejected(bad, "not a power of two");
  bad = bytes;
  poke<uint32_t>(bad, key + 17, uint32_t(ValueType::kInt32));
  expectRejected(bad, "must be a uint32");
}

TEST(GgufFile, OpeningAMissingFileNamesIt) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
  }
}

TEST(GgufFile, AnEmptyFileIsRefused) { expectRejected({}, "too short"); }

}  // namespace
}  // namespace jitllm::gguf
