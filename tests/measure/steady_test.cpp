// measure_steady against fake sequences of takes and host loads (the seams of measure/steady.h): a take
// run beside another job, or one whose result is implausible (the two-thread scaling of 0.17),
// is detected, redone and left out of the result; a host busy throughout is reported, not hidden.
#include "herd/measure/steady.h"

#include <gtest/gtest.h>

#include <vector>

namespace herd::measure {
namespace {

// Replays `seconds` as the takes and `loads` as the other jobs' load measured around each of them.
struct Fake {
  std::vector<double> seconds, loads;
  int taken = 0, probed = 0;
  TakeFn take() {
    return [this] { return seconds.at(static_cast<std::size_t>(taken++)); };
  }
  LoadProbe probe() {
    return {[] {}, [this] { return loads.at(static_cast<std::size_t>(probed++)); }};
  }
};

TEST(Steady, CleanTakesKeepTheBest) {
  Fake f{{0.12, 0.10}, {0.0, 0.0}};
  const SteadyResult r = measure_steady("gemm", f.take(), nullptr, SteadyOptions{}, f.probe());
  EXPECT_EQ(f.taken, 2);
  EXPECT_DOUBLE_EQ(r.seconds, 0.10);
  EXPECT_FALSE(r.disturbed);
  EXPECT_EQ(r.disturbed_takes(), 0);
  EXPECT_EQ(r.line(), "gemm: 2 takes, best 100.00 ms");
}

// A competing process used a core during the first take: that take is slow, the probe saw it, it is
// redone and the result is the best of the clean takes, not the (faster or slower) disturbed one.
TEST(Steady, ATakeBesideAnotherJobIsRedone) {
  Fake f{{0.30, 0.11, 0.10}, {1.0, 0.02, 0.0}};
  const SteadyResult r = measure_steady("gemm, all cores", f.take(), nullptr, SteadyOptions{}, f.probe());
  ASSERT_EQ(f.taken, 3);
  EXPECT_DOUBLE_EQ(r.seconds, 0.10);
  EXPECT_FALSE(r.disturbed);
  EXPECT_EQ(r.disturbed_takes(), 1);
  EXPECT_NE(r.takes[0].disturbed.find("1.00 background jobs"), std::string::npos) << r.takes[0].disturbed;
  EXPECT_TRUE(r.takes[1].disturbed.empty());
  EXPECT_NE(r.line().find("3 takes, best 100.00 ms (1 disturbed: other jobs ran beside it"), std::string::npos)
      << r.line();
}

// The case: the all-core GEMM of a 2-core host measured a scaling of 0.17 while the probe saw
// nothing (the competitor came and went between /proc readings). The plausibility check catches it.
TEST(Steady, AnImplausibleTakeIsRedone) {
  const double one_thread = 0.20;  // seconds of the same work on one thread
  auto scaling = [&](double s) { return one_thread / s - 1.0; };
  auto plausible = [&](double s) -> std::string {
    return scaling(s) < 0.5 ? "two-thread scaling " + std::to_string(scaling(s)).substr(0, 4) + " far below 1" : "";
  };
  Fake f{{0.171, 0.105, 0.1}, {0.0, 0.0, 0.0}};
  const SteadyResult r = measure_steady("gemm, all cores", f.take(), plausible, SteadyOptions{}, f.probe());
  ASSERT_EQ(f.taken, 3);
  EXPECT_DOUBLE_EQ(r.seconds, 0.1);
  EXPECT_NEAR(scaling(r.seconds), 1.0, 1e-12);
  EXPECT_NE(r.takes[0].disturbed.find("scaling 0.16 far below 1"), std::string::npos) << r.takes[0].disturbed;
  EXPECT_FALSE(r.disturbed);
}

// Busy throughout: the bound stops the retries, the best take is kept and the line says so.
TEST(Steady, DisturbedEveryTimeIsBoundedAndSaid) {
  Fake f{{0.5, 0.4, 0.45, 0.6, 9.9}, {1.0, 1.0, 0.8, 1.0, 1.0}};
  SteadyOptions o;
  o.takes = 2;
  o.max_takes = 4;
  const SteadyResult r = measure_steady("reference step", f.take(), nullptr, o, f.probe());
  EXPECT_EQ(f.taken, 4);
  EXPECT_TRUE(r.disturbed);
  EXPECT_DOUBLE_EQ(r.seconds, 0.4);
  EXPECT_NE(r.line().find("every take was disturbed"), std::string::npos) << r.line();
}

// Work timed on the thread's CPU clock does not run while descheduled: the host load is not probed.
TEST(Steady, CpuClockTakesIgnoreTheHostLoad) {
  Fake f{{0.2, 0.1}, {}};
  SteadyOptions o;
  o.load_sensitive = false;
  const SteadyResult r = measure_steady("gemm, 1 thread", f.take(), nullptr, o, f.probe());
  EXPECT_EQ(f.probed, 0);
  EXPECT_EQ(f.taken, 2);
  EXPECT_DOUBLE_EQ(r.seconds, 0.1);
}

}  // namespace
}  // namespace herd::measure
