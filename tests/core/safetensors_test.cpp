// safetensors: the half-precision conversions against IEEE bit patterns worked out by hand, a file that
// transformers wrote (tests/train/golden/hf), round trips of herd's writer, and malformed files refused
// in one line naming the file and the tensor.
#include "herd/core/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace herd {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(HERD_SOURCE_DIR) + "/tests/train/golden/hf/tiny/model.safetensors";

TEST(Safetensors, HalfPrecisionConversionsGiveTheIeeeBitPatterns) {
  // fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);               // the largest half
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);               // rounds past it: infinity
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  EXPECT_EQ(float_to_fp16(0.1f), 0x2e66);
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // a tie: to even
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // a tie: to even
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  // Every finite half survives the round trip through float.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaNs
    ASSERT_EQ(float_to_fp16(fp16_to_float(static_cast<std::uint16_t>(h))), h) << std::hex << h;
  }
  // bf16: the top half of a float, rounded to nearest even.
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16(-3.0f), 0xc040);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Safetensors, ReadsAFileThatTransformersWrote) {
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(kTiny);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ((*f)->entries().size(), 2u + 3u * 9u + 1u);  // embedding, 3 layers of 9, final norm, head
  const SafetensorsEntry* e = (*f)->find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::kF32);
  EXPECT_EQ(e->shape, (std::vector<std::int64_t>{2048, 48}));
  // A slice reads the same values as the whole tensor.
  std::vector<double> all(static_cast<std::size_t>(e->numel())), part(100);
  (*f)->read<double>(*e, 0, e->numel(), all.data());
  (*f)->read<double>(*e, 4800, 100, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 4800));
  EXPECT_EQ((*f)->find("no.such.tensor"), nullptr);
}

class SafetensorsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("herd_st_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  // A file with this header text and `data` bytes of zeros.
  std::string raw(const std::string& name, const std::string& header, std::size_t data) {
    std::ofstream out(path(name), std::ios::binary);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << std::string(data, '\0');
    return path(name);
  }
  std::string error_of(const std::string& p) {
    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(p);
    return f.ok() ? "" : f.error().message();
  }
  fs::path dir_;
};

TEST_F(SafetensorsFiles, WriteThenReadRoundTripsEveryDtype) {
  const std::vector<double> values = {1.0, -2.5, 0.1, 3.140625, 1e-3, -65504.0};
  std::vector<SafetensorsOut> ts;
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    ts.push_back({std::string("t_") + dtype_name(d), d, {2, 3}});
  }
  ASSERT_TRUE(write_safetensors(
                  path("rt.safetensors"), ts,
                  [&](std::size_t, std::vector<double>& v) {
                    v = values;
                    return Status::Ok();
                  },
                  Json{{"format", "pt"}})
                  .ok());
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path("rt.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ((*f)->metadata()["format"], "pt");
  for (const SafetensorsOut& t : ts) {
    const SafetensorsEntry* e = (*f)->find(t.name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dtype, t.dtype);
    std::vector<double> got(6);
    (*f)->read<double>(*e, 0, 6, got.data());
    for (std::size_t i = 0; i < 6; ++i) {
      double want = values[i];
      if (t.dtype == DType::kF32) want = static_cast<float>(values[i]);
      if (t.dtype == DType::kBF16) want = bf16_to_float(float_to_bf16(static_cast<float>(values[i])));
      if (t.dtype == DType::kF16) want = fp16_to_float(float_to_fp16(static_cast<float>(values[i])));
      EXPECT_EQ(got[i], want) << t.name << " " << i;
    }
  }
}

TEST_F(SafetensorsFiles, MalformedFilesAreOneLineErrorsNamingFileAndTensor) {
  auto expect_error = [&](const std::string& p, std::initializer_list<const char*> parts) {
    const std::string m = error_of(p);
    ASSERT_FALSE(m.empty()) << p;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(p), std::string::npos) << m;
    for (const char* s : parts) EXPECT_NE(m.find(s), std::string::npos) << m;
  };
  // Truncated: the fixture cut in the middle of its data.
  {
    std::ifstream in(kTiny, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path("cut.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    expect_error(path("cut.safetensors"), {"outside the data section", "truncated"});
    std::ofstream(path("short.safetensors"), std::ios::binary) << bytes.substr(0, 5);
    expect_error(path("short.safetensors"), {"shorter than the 8-byte header length"});
    std::ofstream(path("head.safetensors"), std::ios::binary) << bytes.substr(0, 100);
    expect_error(path("head.safetensors"), {"header length", "exceeds the file"});
  }
  expect_error(
      raw("overlap.safetensors",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12),
      {"'a'", "'b'", "overlap"});
  expect_error(raw("size.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               {"'a'", "holds 8 bytes", "need 12"});
  expect_error(raw("dtype.safetensors", R"({"q":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4),
               {"'q'", "dtype \"I8\" is not supported"});
  expect_error(raw("json.safetensors", "{not json", 0), {"safetensors header"});
  expect_error(path("absent.safetensors"), {"cannot open"});
}

}  // namespace
}  // namespace herd
