// Host accounting against hand-made /proc files and hand-computed CPU shares; and the real readers on
// this process's own work.
#include "herd/measure/host.h"

#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace herd::measure {
namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

TEST(Host, StatFieldsSkipACommandNameWithSpacesAndParentheses) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("herd_stat_" + std::to_string(::getpid()));
  // Field 2 is "(a) (b c)": the fields start after the last ')'.
  std::ofstream(file) << "42 (a) (b c) R 7 42 42 0 -1 4194560 100 0 0 0 250 30 0 0 20 -5 3 0 100\n";
  const std::vector<std::string> f = stat_fields(file);
  ASSERT_GE(f.size(), 17u);
  EXPECT_EQ(f[0], "R");     // field 3: state
  EXPECT_EQ(f[1], "7");     // field 4: parent
  EXPECT_EQ(f[11], "250");  // field 14: utime
  EXPECT_EQ(f[12], "30");   // field 15: stime
  EXPECT_EQ(f[16], "-5");   // field 19: nice
  std::filesystem::remove(file);
  EXPECT_TRUE(stat_fields(file).empty());  // the process exited
}

TEST(Host, OtherProcessesLeaveThisOneOut) {
  const std::string self = std::to_string(::getpid());
  for (const auto& p : other_processes()) EXPECT_NE(p.filename().string(), self);
}

TEST(Host, BackgroundJobsAreTheCpuOtherJobsTook) {
  HostCpuTimes a, b;
  a.ok = b.ok = true;
  a.wall_s = 10, b.wall_s = 12;  // 2 s on 2 cores: 4 core-seconds
  a.busy_s = 100, b.busy_s = 103.5;
  a.processes = {{100, 50}}, b.processes = {{100, 52.5}};  // we used 2.5 of the 3.5 busy: the others 1.0 = 0.5 cores
  // The others left us 1.5 cores; the fair-share rule 2 / (1 + B) = 1.5 gives B = 1/3.
  EXPECT_NEAR(background_jobs_between(a, b, 2), 0.5 / 1.5, 1e-12);
  b.busy_s = 102.5;  // nothing but us
  EXPECT_NEAR(background_jobs_between(a, b, 2), 0.0, 1e-12);
  // A sibling rank that exits between the readings takes none of the job's time back out of it; one
  // that starts after the first reading counts whole; a pid reused by a newer process counts from zero.
  a.processes = {{100, 30}, {101, 20}, {102, 9}}, b.processes = {{100, 31.5}, {103, 0.5}, {102, 0.5}};
  EXPECT_NEAR(job_seconds_between(a, b), 2.5, 1e-12);
  EXPECT_NEAR(background_jobs_between(a, b, 2), 0.0, 1e-12);
  b.ok = false;
  EXPECT_EQ(background_jobs_between(a, b, 2), -1.0);
  EXPECT_EQ(job_seconds_between(a, b), -1.0);
  // The real readings count this process's own CPU as the job's: 0.2 s of CPU used here (by the
  // process clock, however long that takes on a busy host) moves the job's seconds by about that much (ticks are
  // 10 ms), so it is not taken for another job's, even while ctest's other processes of this test
  // binary (siblings by the job's rule) start and exit around it.
  const HostCpuTimes before = host_cpu_times();
  ASSERT_TRUE(before.ok);
  const double cpu0 = process_cpu_seconds();
  volatile double sink = 0;
  while (process_cpu_seconds() - cpu0 < 0.2) sink = sink + 1.0;
  const HostCpuTimes after = host_cpu_times();
  ASSERT_TRUE(after.ok);
  const double job = job_seconds_between(before, after);
  EXPECT_GT(job, 0.1);
  EXPECT_GE(after.busy_s - before.busy_s, job - 0.02);
}

TEST(Host, BackgroundJobSamplingIsANonNegativeWeight) {
  // Each runnable group weighs 1.25^-nice, at most 1.25^20 ~ 87 for nice -20; the count is bounded by
  // the processes on the host.
  const double b = sample_background_jobs(2);
  EXPECT_GE(b, 0.0);
  EXPECT_LE(b, 87.0 * static_cast<double>(other_processes().size() + 1));
  EXPECT_EQ(sample_background_jobs(0), 0.0);
}

}  // namespace
}  // namespace herd::measure
