// A measurement that notices when it was disturbed: taken several times, the best take kept, and taken
// again (a bounded number of times) when a take ran beside other jobs or its result is implausible.
//
// `herd calibrate` measures this machine once and every plan of herd's own runs is scaled by what it
// found, so one disturbed measurement (a process that used a core for a few seconds while the all-core
// GEMM ran once recorded a two-thread scaling of 0.17 instead of 1.0) spoils every plan after it. The
// rule here: each measurement is taken `takes` times and the best (shortest) take is kept; a take is
// disturbed when other jobs took more than `max_background` of the cores while it ran (wall-clock
// measurements only: work on a thread's CPU clock does not run while descheduled) or when the caller's
// plausibility check rejects it (a scaling far below 1, a rate far from the last calibration of this
// machine); disturbed takes are redone up to `max_takes` in all. When every take was disturbed, the best
// one is kept and the result says so. The clock and the host probe are seams: the test feeds a fake
// sequence of takes and loads.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace herd::measure {

struct SteadyOptions {
  int takes = 2;                 // takes of every measurement; the best is kept
  int max_takes = 4;             // at most this many in all, disturbed ones redone
  double max_background = 0.25;  // other jobs' load during a take (host_share's B) above this: disturbed
  bool load_sensitive = true;    // false: the take runs on a thread's CPU clock; other jobs do not disturb it
};

// One take of a measurement: its seconds (shorter is better).
using TakeFn = std::function<double()>;
// Why a take's seconds are implausible, or "" when they are plausible.
using PlausibleFn = std::function<std::string(double seconds)>;

// The host around a take: begin() before it, end() after it returns the other jobs' load meanwhile
// (background jobs B, as measure::background_jobs_between; < 0: unknown, taken as undisturbed).
struct LoadProbe {
  std::function<void()> begin;
  std::function<double()> end;
};
// The /proc probe: host_cpu_times() before and after, background_jobs_between over `cores`.
LoadProbe host_load_probe(int cores);

struct Take {
  double seconds = 0;
  double background = -1;  // the other jobs' load meanwhile (-1: not probed or unknown)
  std::string disturbed;   // why this take was disturbed; "" when it was not
};

struct SteadyResult {
  std::string what;
  double seconds = 0;           // the best undisturbed take, or the best take when all were disturbed
  std::vector<Take> takes;      // in order
  bool disturbed = false;       // every take was disturbed: the result is the best of disturbed takes
  int disturbed_takes() const;  // how many takes were disturbed (each was redone while the bound allowed)
  // One line: "gemm, all cores: 2 takes, best 12.30 ms", with "(1 disturbed: WHY)" when a take was
  // redone and "; every take was disturbed: ..." when none was clean.
  std::string line() const;
};

SteadyResult measure_steady(const std::string& what, const TakeFn& take, const PlausibleFn& plausible,
                            const SteadyOptions& options, const LoadProbe& probe);

}  // namespace herd::measure
