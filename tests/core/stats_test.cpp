// median(): odd and even counts, unsorted input, none.
#include "herd/core/stats.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(Stats, MedianOfOddAndEvenCountsAndNone) {
  EXPECT_EQ(median({3.0, 100.0, 1.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);  // the mean of the two middle values
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({}), 0.0);
}

}  // namespace
}  // namespace herd
