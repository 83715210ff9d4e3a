// The OpenMP spin budget (kernels/openmp_wait.h): the choice from the host's shape. `herd train`
// setting it: tests/train/openmp_wait_cli_test.cpp.
#include "herd/kernels/openmp_wait.h"

#include <gtest/gtest.h>

namespace herd::kernels {
namespace {

TEST(OpenMpWait, SpinsBrieflyWhenEveryThreadHasACore) {
  const SpinChoice c = choose_spin(2, 1, 2);
  EXPECT_GT(c.spin_count, 0);
  // libgomp's own default is 300,000 iterations (about 3 ms): the budget is a small part of it.
  EXPECT_LE(c.spin_count, 10000);
  EXPECT_NE(c.reason.find("1 process x 2 threads on 2 cores"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_spin(16, 4, 4).spin_count, c.spin_count);
  EXPECT_EQ(choose_spin(1, 1, 1).spin_count, c.spin_count);
}

TEST(OpenMpWait, SleepsAtOnceWhenThreadsOutnumberCores) {
  // Two MPI ranks of two threads on two cores: a spinning thread would hold the core its partner needs.
  const SpinChoice c = choose_spin(2, 2, 2);
  EXPECT_EQ(c.spin_count, 0);
  EXPECT_NE(c.reason.find("2 processes x 2 threads on 2 cores"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_spin(4, 1, 8).spin_count, 0);
  // Nonsense counts are read as one, not as a division by zero.
  EXPECT_GT(choose_spin(0, 0, 0).spin_count, 0);
}

}  // namespace
}  // namespace herd::kernels
