// Tensor views (slice, select, transpose, view) share storage and address the right elements;
// copies convert dtypes (fp32, fp64, bf16 rounding to nearest even); Arena marks, resets and peaks.
#include "herd/tensor/tensor.h"

#include <gtest/gtest.h>

#include "herd/tensor/arena.h"

namespace herd::tensor {
namespace {

Tensor iota(const Dims& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

TEST(Tensor, ShapeStridesAndViews) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.strides(), (Dims{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.owns_storage());
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.at<float>({1, 2, 3}), 23.0f);

  Tensor s = t.slice(1, 1, 3);  // (2, 2, 4), not contiguous
  EXPECT_EQ(s.shape(), (Dims{2, 2, 4}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.at<float>({1, 0, 2}), 18.0f);
  s.at<float>({0, 0, 0}) = -1.0f;  // writes through to the parent
  EXPECT_EQ(t.at<float>({0, 1, 0}), -1.0f);

  Tensor row = t.select(0, 1);  // (3, 4)
  EXPECT_EQ(row.dim(), 2);
  EXPECT_EQ(row.at<float>({2, 1}), 21.0f);

  Tensor tr = t.transpose(1, 2);  // (2, 4, 3)
  EXPECT_EQ(tr.at<float>({1, 3, 2}), t.at<float>({1, 2, 3}));

  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.at<float>({5, 3}), 23.0f);
  EXPECT_EQ(v.raw(), t.raw());
}

TEST(Tensor, CopyConvertsAndCompacts) {
  Tensor t = iota({3, 5});
  Tensor tr = t.transpose(0, 1).to(DType::kF64);  // contiguous (5, 3) copy
  EXPECT_TRUE(tr.is_contiguous());
  EXPECT_EQ(tr.at<double>({4, 2}), 14.0);
  Tensor bf = Tensor::empty({3}, DType::kBF16);
  Tensor src = Tensor::empty({3}, DType::kF32);
  src.data<float>()[0] = 1.0f;
  src.data<float>()[1] = 1.0f + 1.0f / 256.0f;  // exactly halfway between two bf16 values: rounds to even
  src.data<float>()[2] = 1.0f + 3.0f / 256.0f;  // halfway, rounds up to the even neighbour
  bf.copy_from(src);
  Tensor back = bf.to(DType::kF32);
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  EXPECT_EQ(back.data<float>()[1], 1.0f);
  EXPECT_EQ(back.data<float>()[2], 1.0f + 4.0f / 256.0f);
  Tensor z = Tensor::zeros({2, 2}, DType::kF64);
  z.fill(2.5);
  EXPECT_EQ(z.at<double>({1, 1}), 2.5);
}

TEST(Tensor, BorrowedStorage) {
  std::vector<double> buf(6, 1.0);
  Tensor t = Tensor::borrow(buf.data(), {2, 3}, DType::kF64);
  EXPECT_FALSE(t.owns_storage());
  t.at<double>({1, 2}) = 7.0;
  EXPECT_EQ(buf[5], 7.0);
  EXPECT_EQ(t.device(), Device::kCPU);
  EXPECT_EQ(t.str(), "Tensor(fp64, (2, 3), cpu, borrowed)");
}

TEST(Arena, MarkResetPeakAndTags) {
  Arena a(1 << 20);
  void* p0 = a.allocate(100, "x");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p0) % 64, 0u);
  EXPECT_EQ(a.used(), 128u);  // rounded to 64 bytes
  const Arena::Mark m = a.mark();
  Tensor t = a.tensor({16, 16}, DType::kF32, "scratch", true);
  EXPECT_EQ(t.data<float>()[255], 0.0f);
  a.allocate(64, "scratch");
  EXPECT_EQ(a.used(), 128u + 1024u + 64u);
  a.reset(m);
  EXPECT_EQ(a.used(), 128u);
  EXPECT_EQ(a.peak(), 128u + 1024u + 64u);
  EXPECT_EQ(a.tag_peak("scratch"), 1088u);
  EXPECT_EQ(a.tags().at("scratch").current, 0u);
  void* p1 = a.allocate(8, "y");  // memory after the mark is reused
  EXPECT_EQ(static_cast<char*>(p1), static_cast<char*>(p0) + 128);
  a.reset();
  a.reset_peak();
  EXPECT_EQ(a.peak(), 0u);
  EXPECT_EQ(a.tag_peak("x"), 0u);
}

TEST(ArenaDeathTest, OverflowNamesTheTag) {
  Arena a(256);
  EXPECT_DEATH(a.allocate(1000, "layer0.mlp"), "arena full: 'layer0.mlp' asks 1000 bytes");
}

}  // namespace
}  // namespace herd::tensor
