// JSON inputs beyond what a double or an int64 holds: one error naming the source, never an exception
// escaping (nlohmann reports 1e400 as out_of_range, which once aborted every reader of outside JSON).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "herd/core/json.h"
#include "herd/core/json_text.h"

namespace herd {
namespace {

TEST(JsonLimits, NumbersBeyondADoubleAreAnErrorNamingTheSource) {
  for (const char* text : {R"({"lr": 1e400})", R"({"a": [1, -1e400]})", "1e400", R"({"x": {"y": 2e308}})"}) {
    Result<Json> r = parse_json_text(text, "cfg.json");
    ASSERT_FALSE(r.ok()) << text;
    const std::string& m = r.error().message();
    EXPECT_EQ(m.rfind("cfg.json: ", 0), 0u) << m;
    EXPECT_NE(m.find("number overflow"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // The largest doubles and the smallest subnormals still parse, to the values strtod gives.
  Result<Json> big = parse_json_text(R"({"a": 1.7e308, "b": 4.9e-324, "c": 1e-400})", "ok.json");
  ASSERT_TRUE(big.ok()) << big.error().message();
  EXPECT_EQ((*big)["a"].get<double>(), 1.7e308);
  EXPECT_EQ((*big)["b"].get<double>(), 4.9e-324);
}

// Strings made of raw bytes (an override, a path) that are not UTF-8: written with U+FFFD in place of the
// bad bytes, never an exception (found by the train_config fuzzer: `--optim.lr=\xffe-3` aborted herd).
TEST(JsonLimits, TextOfStringsThatAreNotUtf8ReplacesTheBadBytes) {
  const Json j = {{"dir", std::string("/runs/caf\xe9/ckpt")},
                  {"lr", std::string("\xff"
                                     "e-3")}};
  EXPECT_THROW((void)j.dump(), Json::type_error);  // what nlohmann does by default
  const std::string text = json_text(j);
  EXPECT_NE(text.find("/runs/caf\xef\xbf\xbd/ckpt"), std::string::npos) << text;
  Result<Json> back = parse_json_text(text, "x");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(json_preview(Json(std::string("\xff"))), "\"\xef\xbf\xbd\"");
  EXPECT_EQ(json_text(Json{{"a", 1}}, 1), "{\n \"a\": 1\n}");
}

TEST(JsonLimits, ReadingAFileWithAnOverflowNamesTheFile) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("herd_json_limits_" + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << R"({"hidden_size": 1e400})";
  Result<Json> r = read_json_file(p.string());
  std::filesystem::remove(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message().rfind(p.string() + ": ", 0), 0u) << r.error().message();
}

TEST(JsonLimits, ADirectoryIsNotAJsonFile) {
  Result<Json> r = read_json_file(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("is a directory"), std::string::npos) << r.error().message();
}

TEST(JsonLimits, IntegersAbove2To63AreRefusedNotWrapped) {
  // 2^64 - 1 is an unsigned JSON integer; read as int64 it used to become -1.
  const Json j = Json::parse(R"({"a": 18446744073709551615, "b": 9223372036854775807, "c": 9223372036854775808})");
  Result<std::int64_t> a = json_int(j, "m", "a");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message(), "m.a: expected an integer below 2^63, got 18446744073709551615");
  EXPECT_EQ(*json_int(j, "m", "b"), 9223372036854775807);
  EXPECT_FALSE(json_int_or(j, "m", "c", 0).ok());
}

TEST(JsonLimits, NestingDeeperThanTheLimitIsOneErrorNamingTheSource) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& text : {deep, std::string(65, '[') + std::string(65, ']'),
                                  R"({"a": )" + std::string(64, '{') + std::string(64, '}') + "}"}) {
    Result<Json> r = parse_json_text(text, "cfg.json");
    ASSERT_FALSE(r.ok()) << text.size();
    const std::string& m = r.error().message();
    EXPECT_EQ(m.rfind("cfg.json: nested more than 64 arrays or objects deep (byte ", 0), 0u) << m;
    EXPECT_NE(m.find(text[0] == '[' ? "(byte 64)" : "(byte 69)"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // 64 levels read; brackets inside strings are text, not nesting.
  const std::string at_limit = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(parse_json_text(at_limit, "ok.json").ok());
  const std::string in_string = R"({"s": ")" + std::string(1000, '[') + R"(\"[{"})";
  Result<Json> s = parse_json_text(in_string, "ok.json");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ((*s)["s"].get<std::string>().size(), 1003u);
}

TEST(JsonLimits, PreviewsOfLargeOrDeepValuesAreCutToTheLimit) {
  // A value built in code is not bounded by the parser: the preview walks only what it prints.
  Json deep = Json::array();
  for (int i = 0; i < 100000; ++i) {
    Json outer = Json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  const std::string cut = std::string(37, '[') + "...";
  EXPECT_EQ(json_preview(deep), cut);
  Json wide = Json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_EQ(json_preview(wide), "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,1...");
  EXPECT_EQ(json_preview(Json(std::string(1 << 20, 'x'))), "\"" + std::string(36, 'x') + "...");
  EXPECT_EQ(json_preview(Json{{std::string(1000, 'k'), 1}}), "{\"" + std::string(35, 'k') + "...");
  // Short values read as JSON text.
  EXPECT_EQ(json_preview(Json::parse(R"({"a":[1,"b",null],"c":true})")), R"({"a":[1,"b",null],"c":true})");
}

}  // namespace
}  // namespace herd
