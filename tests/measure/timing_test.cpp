// The calibration timers: the median of the repeats, the warm-up left out, and the thread CPU clock
// that does not run while the thread sleeps. Only what holds on a loaded host is asserted: a sleep's
// wall time is at least its length, its CPU time next to nothing, and CPU time is not stretched by
// other jobs.
#include "herd/measure/timing.h"

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <thread>

namespace herd::measure {
namespace {

TEST(Timing, TheWarmUpRunIsNotCounted) {
  int calls = 0;
  // The warm-up computes 200 ms of this thread's CPU, the five timed runs nothing: the median of the
  // timed runs is far under it. CPU time, which a loaded host does not stretch, so no host decides it.
  const double t = time_median(5, Clock::kThreadCpu, [&] {
    if (calls++ > 0) return;
    const double c0 = thread_cpu_seconds();
    volatile double sink = 0;
    while (thread_cpu_seconds() - c0 < 0.2) sink = sink + 1.0;
  });
  EXPECT_EQ(calls, 6);
  EXPECT_LT(t, 0.1);
}

TEST(Timing, TheThreadCpuClockStopsWhileSleeping) {
  const double wall = time_median(3, Clock::kWall, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  const double cpu =
      time_median(3, Clock::kThreadCpu, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  EXPECT_GE(wall, 0.03);
  EXPECT_LT(cpu, 0.01);
  // Busy work is counted on the CPU clock: 30 ms of this (single-threaded) process's CPU, however
  // long that takes on a busy host.
  const double busy = time_median(3, Clock::kThreadCpu, [] {
    timespec ts{};
    auto process_cpu = [&ts] {
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    const double c0 = process_cpu();
    volatile double sink = 0;
    while (process_cpu() - c0 < 0.03) sink = sink + 1.0;
  });
  EXPECT_GT(busy, 0.015);
}

}  // namespace
}  // namespace herd::measure
