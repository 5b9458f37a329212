// jitllmctl's JSON writer: every string escaped so that a strict reader gets it back, numbers
// exact, misuse caught.
#include "ctl/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include "mini_json.h"

namespace jitllm::ctl {
namespace {

using testing::JsonReader;

TEST(JsonWriter, EscapesQuotesBackslashesAndEveryControlCharacter) {
  EXPECT_EQ(jsonQuote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(jsonQuote("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(jsonQuote(std::string("\0\x01\x1f", 3)), R"("\u0000\u0001\u001f")");
  EXPECT_EQ(jsonQuote("/"), R"("/")");       // no need to escape the solidus
  EXPECT_EQ(jsonQuote("\x7f"), "\"\x7f\"");  // DEL is not a control character in JSON
}

TEST(JsonWriter, KeepsValidUtf8AndReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(jsonQuote("é😀中"), "\"é😀中\"");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(jsonQuote("a\xff"
                      "b"),
            "\"a" + fffd + "b\"");                                                    // not a lead byte
  EXPECT_EQ(jsonQuote("\xC3"), "\"" + fffd + "\"");                                   // truncated sequence
  EXPECT_EQ(jsonQuote("\xC0\xAF"), "\"" + fffd + fffd + "\"");                        // overlong '/'
  EXPECT_EQ(jsonQuote("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");             // a UTF-16 surrogate
  EXPECT_EQ(jsonQuote("\xF4\x90\x80\x80"), "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
}

TEST(JsonWriter, AnyByteStringComesOutAsJsonThatAStrictReaderAccepts) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; i++) {
    std::string s(size_t(rng() % 24), '\0');
    for (char& c : s) c = char(rng() % 256);
    JsonWriter j;
    j.beginObject().field("s", s).endObject();
    const auto v = JsonReader::parse(j.str());
    // Valid UTF-8 round-trips exactly; anything else only gains replacement characters.
    if (jsonQuote(s).find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_EQ(v["s"].string, s);
    }
  }
}

TEST(JsonWriter, NumbersAreExactAndNonFiniteDoublesAreNull) {
  JsonWriter j;
  j.beginArray();
  j.value(0.1).value(1e300).value(-2.5f).value(std::numeric_limits<double>::quiet_NaN());
  j.value(std::numeric_limits<double>::infinity()).value(int32_t(-7)).value(std::numeric_limits<uint64_t>::max());
  j.value(true).value(false).null();
  j.endArray();
  EXPECT_EQ(j.str(), "[0.1,1e+300,-2.5,null,null,-7,18446744073709551615,true,false,null]");
  const auto v = JsonReader::parse(j.str());
  EXPECT_EQ(v[0].number, 0.1);
  EXPECT_EQ(v[1].number, 1e300);
}

TEST(JsonWriter, NestedObjectsAndArraysGetTheirCommas) {
  JsonWriter j;
  j.beginObject().field("a", 1).key("b").beginArray().beginObject().endObject().value("x").endArray();
  j.key("c").beginObject().field("d", "e").endObject().endObject();
  EXPECT_EQ(j.str(), R"({"a":1,"b":[{},"x"],"c":{"d":"e"}})");
  EXPECT_NO_THROW(JsonReader::parse(j.str()));
}

TEST(JsonWriter, ACStringIsWrittenAsAStringNotAsABool) {
  JsonWriter j;
  j.beginObject().field("k", "text").endObject();
  EXPECT_EQ(j.str(), R"({"k":"text"})");
}

TEST(JsonWriter, MisuseIsALogicErrorNotBrokenOutput) {
  {
    JsonWriter j;
    j.beginObject();
    EXPECT_THROW(j.value(1), std::logic_error);  // no key
  }
  {
    JsonWriter j;
    j.beginArray();
    EXPECT_THROW(j.key("k"), std::logic_error);
    EXPECT_THROW(j.endObject(), std::logic_error);
    EXPECT_THROW(j.str(), std::logic_error);  // incomplete
  }
  {
    JsonWriter j;
    j.value(1);
    EXPECT_THROW(j.value(2), std::logic_error);  // a second document
  }
  {
    JsonWriter j;
    j.beginObject().key("k");
    EXPECT_THROW(j.endObject(), std::logic_error);  // a key without its value
  }
}

}  // namespace
}  // namespace jitllm::ctl
