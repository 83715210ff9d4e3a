// The OpenMP spin budget (kernels/openmp_wait.h): the choice from the host's shape. `herd train`
// setting it: tests/train/openmp_wait_cli_test.cpp.
#include "herd/kernels/openmp_wait.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

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

// Another process that spins counts as about one core; this process's own spinning thread does not.
// (Other tests may load the host too, so only the lower bound with a busy neighbour is asserted.)
TEST(OpenMpWait, BusyCoresCountOtherProcessesNotThisOne) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<unsigned long> spins{0};
    for (;;) spins.fetch_add(1, std::memory_order_relaxed);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double with_neighbour = busy_cores_now();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_GE(with_neighbour, 0.6);

  std::atomic<bool> stop{false};
  std::thread own([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const double own_only = busy_cores_now();
  stop = true;
  own.join();
  // At most what the other tests of a parallel run add; never this thread's core on an idle host.
  EXPECT_GE(own_only, 0.0);
  if (with_neighbour < 1.4) {
    EXPECT_LT(own_only, 0.6) << "this process's own thread was counted";
  }
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
