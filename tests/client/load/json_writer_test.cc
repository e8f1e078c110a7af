#include "client/load/json_writer.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain /cgacct-load"), "\"plain /cgacct-load\"");
  EXPECT_EQ(JsonQuote("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(JsonQuote("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(JsonQuote("l1\nl2\r\t\b\f"), "\"l1\\nl2\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f\x7f", 3)),
            "\"\\u0001\\u001f\x7f\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
}

// nlohmann-json's error_handler_t::replace: each invalid byte becomes
// U+FFFD, written as UTF-8.
TEST(JsonQuoteTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  const std::string r = "\xEF\xBF\xBD";                              // U+FFFD
  EXPECT_EQ(JsonQuote("64 \xC2\xB5s"), "\"64 \xC2\xB5s\"");          // µ
  EXPECT_EQ(JsonQuote("\xE2\x86\x92"), "\"\xE2\x86\x92\"");          // →
  EXPECT_EQ(JsonQuote("\xF0\x9F\x90\xA7"), "\"\xF0\x9F\x90\xA7\"");  // 4 bytes
  EXPECT_EQ(JsonQuote("a\xFFz"), "\"a" + r + "z\"");                 // stray
  EXPECT_EQ(JsonQuote("\xC2"), "\"" + r + "\"");                     // cut
  EXPECT_EQ(JsonQuote("\xC0\xAF"), "\"" + r + r + "\"");             // overlong
  EXPECT_EQ(JsonQuote("\xED\xA0\x80"), "\"" + r + r + r + "\"");  // surrogate
  EXPECT_EQ(JsonQuote("\xF4\x90\x80\x80"),
            "\"" + r + r + r + r + "\"");  // past U+10FFFF
}

TEST(JsonWriterTest, CompactDocument) {
  JsonWriter w(/*indent=*/0);
  w.BeginObject();
  w.Key("reads").Uint(UINT64_MAX);
  w.Key("delta").Int(-3);
  w.Key("flags")
      .BeginArray()
      .Bool(true)
      .Bool(false)
      .Null()
      .String("x")
      .EndArray();
  w.Key("empty_object").BeginObject().EndObject();
  w.Key("empty_array").BeginArray().EndArray();
  w.Key("nested").BeginObject().Key("k\"ey").String("v\n").EndObject();
  w.EndObject();
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.str(),
            "{\"reads\":18446744073709551615,\"delta\":-3,"
            "\"flags\":[true,false,null,\"x\"],\"empty_object\":{},"
            "\"empty_array\":[],\"nested\":{\"k\\\"ey\":\"v\\n\"}}");
}

TEST(JsonWriterTest, PrettyDocument) {
  JsonWriter w;  // two-space indent
  w.BeginObject();
  w.Key("a").Int(1);
  w.Key("b").BeginArray().Int(2).BeginObject().Key("c").Int(3).EndObject();
  w.EndArray();
  w.Key("d").BeginArray().EndArray();
  w.EndObject();
  EXPECT_EQ(w.str(),
            "{\n"
            "  \"a\": 1,\n"
            "  \"b\": [\n"
            "    2,\n"
            "    {\n"
            "      \"c\": 3\n"
            "    }\n"
            "  ],\n"
            "  \"d\": []\n"
            "}");
}

TEST(JsonWriterTest, Doubles) {
  JsonWriter w(0);
  w.BeginArray();
  w.Double(0.5).Double(12345678.9).Double(1e20).Double(-0.25).Double(0);
  w.Double(std::nan("")).Double(std::numeric_limits<double>::infinity());
  w.Double(-std::numeric_limits<double>::infinity());
  // 15 significant digits, integral values without ".0", small ones as
  // "%.15g" writes them: the reports read as they did before nlohmann-json.
  w.Double(100).Double(0.1 + 0.2).Double(1e-5).Double(0.0001);
  w.Double(1234567.1234567891);
  w.EndArray();
  EXPECT_EQ(w.str(),
            "[0.5,12345678.9,1e+20,-0.25,0,null,null,null,100,0.3,1e-05,0.0001,"
            "1234567.12345679]");
}

TEST(JsonWriterTest, IncompleteUntilClosed) {
  JsonWriter w;
  EXPECT_FALSE(w.complete());
  w.BeginObject();
  EXPECT_FALSE(w.complete());
  w.EndObject();
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.str(), "{}");
}

TEST(JsonWriterTest, TopLevelScalar) {
  JsonWriter w;
  w.String("only");
  EXPECT_TRUE(w.complete());
  EXPECT_EQ(w.str(), "\"only\"");
}

}  // namespace
}  // namespace cgacct::load
