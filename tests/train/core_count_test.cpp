// The cores a training job sizes itself by are those of the process's affinity mask (core/cores.h):
// under `taskset -c 0`, a cpuset or an MPI binding, a one-rank job gets as many kernel threads as it
// has cores, not as many as the machine has online.
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

#include "herd/core/cores.h"
#include "herd/train/job/job.h"

namespace herd::train {
namespace {

// Runs `fn` on a thread whose affinity mask is the first `n` CPUs of this process's mask.
template <typename F>
void on_cpus(int n, F fn) {
  std::thread t([&] {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
    cpu_set_t some;
    CPU_ZERO(&some);
    for (int c = 0, taken = 0; c < CPU_SETSIZE && taken < n; ++c) {
      if (CPU_ISSET(c, &mine)) {
        CPU_SET(c, &some);
        ++taken;
      }
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof(some), &some), 0);
    fn();
  });
  t.join();
}

TEST(CoreCount, AJobOnOneCoreSizesItselfForOneCore) {
  on_cpus(1, [] {
    EXPECT_EQ(usable_cores(), 1);
    EXPECT_EQ(blas_threads_per_rank(1), 1);
    EXPECT_EQ(blas_threads_per_rank(4), 1);
  });
}

TEST(CoreCount, RanksShareTheCoresOfTheMask) {
  const int cores = usable_cores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(blas_threads_per_rank(1), cores);
  EXPECT_EQ(blas_threads_per_rank(cores), 1);
  EXPECT_EQ(blas_threads_per_rank(2 * cores), 1);
  if (cores >= 2) {
    on_cpus(2, [] {
      EXPECT_EQ(usable_cores(), 2);
      EXPECT_EQ(blas_threads_per_rank(2), 1);
      EXPECT_EQ(blas_threads_per_rank(1), 2);
    });
  }
}

}  // namespace
}  // namespace herd::train
