// The host speed probe (train/plan/host_speed.h, kernels/speed_probe.h): one rate per core, each core's
// median GEMM on its own CPU clock; the calibration's rate read from its record; the ratio clamped.
#include "herd/train/plan/host_speed.h"

#include <gtest/gtest.h>

#include "herd/core/cores.h"
#include "herd/core/timer.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/speed_probe.h"

namespace herd::train {
namespace {

TEST(HostSpeed, RatioIsNowOverCalibratedClampedAndOneWhenEitherIsUnknown) {
  EXPECT_DOUBLE_EQ(host_speed_ratio(90e9, 100e9), 0.9);
  EXPECT_DOUBLE_EQ(host_speed_ratio(120e9, 100e9), 1.2);
  EXPECT_DOUBLE_EQ(host_speed_ratio(1e9, 100e9), 0.25);
  EXPECT_DOUBLE_EQ(host_speed_ratio(1e12, 100e9), 4.0);
  EXPECT_DOUBLE_EQ(host_speed_ratio(0, 100e9), 1.0);
  EXPECT_DOUBLE_EQ(host_speed_ratio(90e9, 0), 1.0);
}

TEST(HostSpeed, TheCalibratedRateComesFromTheRecordAndIsZeroInAnOlderFile) {
  EXPECT_DOUBLE_EQ(calibrated_probe_flops(Json{{"host_speed_probe_flops_per_s", 7.5e10}}), 7.5e10);
  EXPECT_DOUBLE_EQ(calibrated_probe_flops(Json::object()), 0.0);
  EXPECT_DOUBLE_EQ(calibrated_probe_flops(Json{{"host_speed_probe_flops_per_s", "fast"}}), 0.0);
  EXPECT_DOUBLE_EQ(calibrated_probe_flops(Json{{"host_speed_probe_flops_per_s", -3.0}}), 0.0);
}

// One rate per thread, each the FLOPs of one GEMM over a time no shorter than that thread's CPU time
// for it: checked against the same GEMM timed here on this thread's CPU clock (a probe thread runs
// one GEMM at a time on its own clock, so its median cannot beat the fastest of many here by much;
// the bound is loose on purpose, as both run on a shared host).
TEST(HostSpeed, EveryThreadGetsARateOfTheRightMagnitude) {
  EXPECT_TRUE(kernels::gemm_rate_per_thread(0, 64, 3).empty());
  EXPECT_TRUE(kernels::gemm_rate_per_thread(2, 0, 3).empty());
  EXPECT_TRUE(kernels::gemm_rate_per_thread(2, 64, 0).empty());
  const std::int64_t n = 128;
  const std::vector<double> rates = kernels::gemm_rate_per_thread(3, n, 5);
  ASSERT_EQ(rates.size(), 3u);
  std::vector<float> a(n * n, 0.01f), b(n * n, 0.02f), c(n * n, 0.0f);
  const int saved = kernels::num_threads();
  kernels::set_num_threads(1);
  double best = 1e9;
  for (int i = 0; i < 20; ++i) {
    const double t0 = thread_cpu_seconds();
    kernels::gemm<float>(kernels::Trans::kNo, kernels::Trans::kYes, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f,
                         c.data(), n);
    best = std::min(best, thread_cpu_seconds() - t0);
  }
  kernels::set_num_threads(saved);
  const double fastest = 2.0 * n * n * n / best;
  for (double r : rates) {
    EXPECT_GT(r, 0.0);
    EXPECT_LT(r, 3.0 * fastest) << "a probe faster than the fastest single GEMM here";
  }
  EXPECT_GT(probe_host_flops(usable_cores()), 0.0);
  EXPECT_EQ(probe_host_flops(0), 0.0);
}

}  // namespace
}  // namespace herd::train
