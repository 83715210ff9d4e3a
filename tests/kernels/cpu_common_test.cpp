// kernels/cpu/common.h's row_max against std::max folded left to right: every length around the
// 16-lane blocks, NaNs passed over as std::max(m, x) passes them, -inf rows and the empty row.
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
