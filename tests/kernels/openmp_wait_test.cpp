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
  EXPECT_LE(c.spin_count, 30000);
  EXPECT_NE(c.reason.find("1 process x 2 threads on 2 cores"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_spin(16, 4, 4).spin_count, c.spin_count);
  EXPECT_EQ(choose_spin(1, 1, 1).spin_count, c.spin_count);
}

TEST(OpenMpWait, SpinsLessBesideAJobThatHoldsACoreTheTeamNeeds) {
  const SpinChoice quiet = choose_spin(2, 1, 2, 0.0);
  // One busy loop on a 2-core host: the 2-thread team time-shares the other core.
  const SpinChoice busy = choose_spin(2, 1, 2, 1.0);
  EXPECT_GT(busy.spin_count, 0);
  EXPECT_LT(busy.spin_count, quiet.spin_count);
  EXPECT_NE(busy.reason.find("1 core busy with another job"), std::string::npos) << busy.reason;
  // A stray tick of load is not a job; a job on a core the team does not need changes nothing.
  EXPECT_EQ(choose_spin(2, 1, 2, 0.3).spin_count, quiet.spin_count);
  EXPECT_EQ(choose_spin(4, 1, 2, 1.0).spin_count, quiet.spin_count);
  EXPECT_EQ(choose_spin(4, 1, 2, 2.6).spin_count, busy.spin_count);
  // Threads that outnumber the cores never spin, whatever else runs.
  EXPECT_EQ(choose_spin(2, 2, 2, 1.0).spin_count, 0);
}

TEST(OpenMpWait, BusyCoresAreSampledFromProc) {
  const double b = busy_cores_now();
  EXPECT_GE(b, 0.0);
  EXPECT_LE(b, 1024.0);
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
