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

}  // namespace
}  // namespace herd
