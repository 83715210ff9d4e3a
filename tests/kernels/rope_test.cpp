// RoPE: the table-driven kernel against direct angle computation (both pair layouts, with and
// without Llama 3.1 scaling), the scaled frequencies against the formula's three regimes, and the
// backward as the adjoint of the forward (finite differences in double).
#include "herd/kernels/rope.h"

#include <gtest/gtest.h>

#include <numbers>

#include "herd/kernels/convert.h"
#include "herd/kernels/reference.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::random_vec;
using testing::rel_error;

RopeConfig llama31(std::int64_t head_dim, RopeLayout layout) {
  return RopeConfig{head_dim, 500000.0, 8.0, 1.0, 4.0, 8192, layout};
}

TEST(Rope, InvFreqFollowsLlama31Scaling) {
  const RopeConfig plain{128, 500000.0};
  const RopeConfig scaled = llama31(128, RopeLayout::kHalf);
  const auto f = rope_inv_freq(plain), s = rope_inv_freq(scaled);
  int high = 0, low = 0, mid = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / f[i];
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_DOUBLE_EQ(s[i], f[i]);
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(s[i], f[i] / 8.0);
      ++low;
    } else {
      EXPECT_LT(s[i], f[i]);
      EXPECT_GT(s[i], f[i] / 8.0);
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_DOUBLE_EQ(f[1], std::pow(500000.0, -2.0 / 128.0));
}

template <typename T>
void rope_case(const RopeConfig& cfg, double tol) {
  const std::int64_t n = 19, heads = 3, d = cfg.head_dim;
  std::vector<std::int32_t> pos(n);
  for (std::int64_t t = 0; t < n; ++t) pos[t] = static_cast<std::int32_t>((t * 977) % 20000);  // CP-like, unordered
  RopeTable<T> table(cfg, 20000);
  auto x = random_vec<T>(n * heads * d, 1);
  auto y = x, y_ref = x;
  rope_forward<T>(table, pos.data(), n, heads, y.data(), heads * d);
  ref::rope_rotate<T>(cfg, pos.data(), n, heads, y_ref.data(), 1);
  EXPECT_LT(rel_error(y, y_ref), tol);
  rope_backward<T>(table, pos.data(), n, heads, y.data(), heads * d);  // inverse rotation restores x
  EXPECT_LT(rel_error(y, x), tol);
}

TEST(Rope, MatchesReferenceBothLayouts) {
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    rope_case<float>(llama31(64, layout), 1e-5);
    rope_case<double>(llama31(64, layout), 1e-12);
    rope_case<double>(RopeConfig{10, 10000.0, 0.0, 1, 4, 8192, layout}, 1e-12);
  }
}

TEST(Rope, StridedRowsOfAFusedBuffer) {
  const RopeConfig cfg = llama31(8, RopeLayout::kHalf);
  RopeTable<double> table(cfg, 64);
  const std::int64_t n = 5, heads = 2, ld = 40;  // q heads inside a wider row
  std::vector<std::int32_t> pos = {0, 3, 9, 27, 63};
  auto buf = random_vec<double>(n * ld, 2);
  auto orig = buf;
  rope_forward<double>(table, pos.data(), n, heads, buf.data() + 4, ld);
  std::vector<double> dense(n * heads * 8);
  for (std::int64_t t = 0; t < n; ++t)
    std::copy(orig.begin() + t * ld + 4, orig.begin() + t * ld + 4 + 16, dense.begin() + t * 16);
  ref::rope_rotate<double>(cfg, pos.data(), n, heads, dense.data(), 1);
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t e = 0; e < 4; ++e) EXPECT_EQ(buf[t * ld + e], orig[t * ld + e]);  // untouched
    for (std::int64_t e = 0; e < 16; ++e) EXPECT_NEAR(buf[t * ld + 4 + e], dense[t * 16 + e], 1e-13);
    for (std::int64_t e = 20; e < ld; ++e) EXPECT_EQ(buf[t * ld + e], orig[t * ld + e]);
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const RopeConfig cfg = llama31(6, RopeLayout::kHalf);
  RopeTable<double> table(cfg, 100);
  const std::int64_t n = 4, heads = 2;
  std::vector<std::int32_t> pos = {0, 7, 99, 42};
  auto x = random_vec<double>(n * heads * 6, 3), g = random_vec<double>(n * heads * 6, 4);
  auto dx = g;
  rope_backward<double>(table, pos.data(), n, heads, dx.data(), heads * 6);
  auto loss = [&] {
    auto y = x;
    rope_forward<double>(table, pos.data(), n, heads, y.data(), heads * 6);
    return testing::dot(y, g);
  };
  EXPECT_LT(testing::fd_check(x, dx, loss, 48), 1e-7);
}

// bf16 mode's fused pass (rotate an fp32 x and round into the saved bf16 tensor) is, bit for bit, the
// rotation in place followed by to_bf16, forward and backward, in both layouts, over enough tokens to
// take the parallel branch; the fp32 input is left as it was.
TEST(Rope, RoundedIntoBf16IsTheRotationThenToBf16BitForBit) {
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    const RopeConfig cfg = llama31(64, layout);
    RopeTable<float> table(cfg, 512);
    const std::int64_t n = 600, heads = 4, ld = heads * 64;
    std::vector<std::int32_t> pos(n);
    for (std::int64_t t = 0; t < n; ++t) pos[t] = static_cast<std::int32_t>((t * 37) % 512);
    const std::vector<float> x = random_vec<float>(n * ld, 7);
    for (bool backward : {false, true}) {
      std::vector<float> in_place = x, untouched = x;
      std::vector<bf16> want(x.size()), got(x.size());
      if (backward) {
        rope_backward<float>(table, pos.data(), n, heads, in_place.data(), ld);
        rope_backward(table, pos.data(), n, heads, untouched.data(), ld, got.data());
      } else {
        rope_forward<float>(table, pos.data(), n, heads, in_place.data(), ld);
        rope_forward(table, pos.data(), n, heads, untouched.data(), ld, got.data());
      }
      to_bf16(in_place.data(), n * ld, want.data());
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(got[i].bits, want[i].bits) << "backward " << backward << " element " << i;
        ASSERT_EQ(untouched[i], x[i]) << i;
      }
    }
  }
}

}  // namespace
}  // namespace herd::kernels
