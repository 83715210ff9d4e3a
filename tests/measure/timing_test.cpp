// The calibration timers: the median of the repeats, the warm-up left out, and the thread CPU clock
// that does not run while the thread sleeps.
#include "herd/measure/timing.h"

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <thread>

namespace herd::measure {
namespace {

TEST(Timing, TheWarmUpRunIsNotCounted) {
  int calls = 0;
  // The warm-up sleeps 200 ms, the five timed runs 5 ms: a median of the timed runs only.
  const double t = time_median(5, Clock::kWall,
                               [&] { std::this_thread::sleep_for(std::chrono::milliseconds(calls++ == 0 ? 200 : 5)); });
  EXPECT_EQ(calls, 6);
  EXPECT_GE(t, 0.005);
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
