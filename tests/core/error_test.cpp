#include "herd/core/error.h"

#include <gtest/gtest.h>

#include "herd/core/dtype.h"
#include "herd/core/format.h"
#include "herd/core/json.h"

namespace herd {
namespace {

Result<int> half(int x) {
  if (x % 2) return make_error("x (", x, ") is odd");
  return x / 2;
}

Result<int> quarter(int x) {
  HERD_ASSIGN_OR_RETURN(int h, half(x));
  HERD_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(Result, PropagatesTheFirstError) {
  EXPECT_EQ(*quarter(8), 2);
  ASSERT_FALSE(quarter(6).ok());
  EXPECT_EQ(quarter(6).error().message(), "x (3) is odd");
  EXPECT_EQ(quarter(5).error().with_context("f.json").message(), "f.json: x (5) is odd");
}

TEST(Json, FieldErrorsNameTheField) {
  Json j = Json::parse(R"({"a": 3, "b": "x", "c": 2.5, "d": true})");
  EXPECT_EQ(*json_int(j, "", "a"), 3);
  EXPECT_EQ(json_int(j, "cfg", "b").error().message(), "cfg.b: expected an integer, got \"x\"");
  EXPECT_EQ(json_int(j, "", "c").error().message(), "c: expected an integer, got 2.5");
  EXPECT_EQ(json_int(j, "", "zz").error().message(), "zz: missing; expected an integer");
  EXPECT_EQ(*json_int_or(j, "", "zz", 7), 7);
  EXPECT_FALSE(json_bool_or(j, "", "a", false).ok());
  EXPECT_TRUE(*json_bool(j, "", "d"));
  EXPECT_FALSE(require_positive(std::int64_t{0}, "tiers[0].size").ok());
  EXPECT_EQ(require_positive(-1.0, "x").error().message(), "x: must be a positive number, got -1");
}

TEST(Json, ParseErrorsNameTheSource) {
  auto r = parse_json_text("{\"a\": ", "cluster.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("cluster.json: not valid JSON"), std::string::npos);
  EXPECT_FALSE(read_json_file("/nonexistent/x.json").ok());
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kFP8}) {
    EXPECT_EQ(*parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(dtype_bytes(DType::kBF16), 2u);
  EXPECT_FALSE(parse_dtype("int7").ok());
}

TEST(Format, Numbers) {
  EXPECT_EQ(format_thousands(8030261248), "8,030,261,248");
  EXPECT_EQ(format_thousands(-1234), "-1,234");
  EXPECT_EQ(format_thousands(12), "12");
  EXPECT_EQ(format_bytes(1536.0), "1.50 KiB");
  EXPECT_EQ(format_count(8.03e9), "8.03B");
  EXPECT_EQ(format_seconds(0.00124), "1.240 ms");
}

TEST(CheckDeathTest, AbortsWithExpressionAndMessage) {
  EXPECT_DEATH(HERD_CHECK(1 + 1 == 3, "math is ", "broken"), "1 \\+ 1 == 3: math is broken");
}

}  // namespace
}  // namespace herd
