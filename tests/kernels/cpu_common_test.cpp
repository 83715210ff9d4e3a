// kernels/cpu/common.h: row_max against std::max folded left to right (every length around the 16-lane
// blocks, NaNs passed over as std::max(m, x) passes them, -inf rows, the empty row); fast_exp against
// std::exp, its clamp and NaN; select_bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "herd/kernels/cpu/common.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

template <typename T>
T folded_max(const T* x, std::int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

template <typename T>
void check_row_max() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t n = 0; n <= 70; ++n) {
    std::vector<T> x = testing::random_vec<T>(n, static_cast<std::uint32_t>(100 + n), -50, 50);
    EXPECT_EQ(cpu::row_max(x.data(), n), folded_max(x.data(), n)) << n;
    // The largest in the tail past the last whole block, then in the first lane.
    if (n > 0) {
      x[n - 1] = 1e3;
      EXPECT_EQ(cpu::row_max(x.data(), n), T(1e3)) << n;
      x[0] = 2e3;
      EXPECT_EQ(cpu::row_max(x.data(), n), T(2e3)) << n;
    }
    for (std::int64_t j = 0; j < n; j += 3) x[j] = nan;
    EXPECT_EQ(cpu::row_max(x.data(), n), folded_max(x.data(), n)) << n;
    std::fill(x.begin(), x.end(), neg_inf);
    EXPECT_EQ(cpu::row_max(x.data(), n), neg_inf) << n;
  }
}

TEST(RowMax, EqualsStdMaxOverEveryLengthWithNaNsPassedOver) {
  check_row_max<float>();
  check_row_max<double>();
}

}  // namespace
}  // namespace herd::kernels

namespace herd::kernels {
namespace {

// fast_exp<float> against std::exp in double: within 4 ulp over [-87, 88] (the clamp's range), the
// clamp's values outside it and for +-inf, NaN in -> NaN out (the trainer's non-finite guard relies on
// it), and exact powers of two where the polynomial's argument is 0.
TEST(FastExp, MatchesStdExpWithinFourUlpClampsInfinitiesAndPassesNaN) {
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = cpu::fast_exp(x);
    const double ulp = std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want);
    EXPECT_LE(std::abs(got - want), 4 * ulp) << "x = " << x;
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(cpu::fast_exp(-inf), cpu::fast_exp(-87.0f));
  EXPECT_EQ(cpu::fast_exp(-1e30f), cpu::fast_exp(-87.0f));
  EXPECT_EQ(cpu::fast_exp(inf), cpu::fast_exp(88.0f));
  EXPECT_TRUE(std::isnan(cpu::fast_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(cpu::fast_exp(-inf - -inf)));
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
}

TEST(SelectBits, TakesTheFirstArmWhereTrueTheSecondElseBitForBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cpu::select_bits(true, 1.5f, nan), 1.5f);
  EXPECT_TRUE(std::isnan(cpu::select_bits(false, 1.5f, nan)));
  EXPECT_EQ(std::signbit(cpu::select_bits(true, -0.0f, 0.0f)), true);
  EXPECT_EQ(cpu::select_bits(false, 2.0, -3.25), -3.25);
}

}  // namespace
}  // namespace herd::kernels
