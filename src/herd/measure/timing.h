// Timing primitives of `herd calibrate` and the benchmarks: a thread's CPU clock and the median of
// repeated runs.
//
// The median of the repeats is a kernel's typical speed on a core of its own (the fastest is an outlier
// on a shared virtual machine and made every plan optimistic). Sharing the cores with other jobs is
// modelled separately (topology::host_core_share), so one-thread work is timed by the calling thread's
// CPU clock, which does not run while it is descheduled; work on several threads by the wall clock.
#pragma once

#include <utility>
#include <vector>

#include "herd/core/stats.h"
#include "herd/core/timer.h"

namespace herd::measure {

using herd::thread_cpu_seconds;  // core/timer.h

enum class Clock {
  kThreadCpu,  // the calling thread's CPU time: work that runs on this thread alone
  kWall,       // wall time: work spread over several threads
};

// Runs `f` once to warm up (page faults, library buffers), then `repeats` times, and returns the
// median time of those on `clock`.
template <typename F>
double time_median(int repeats, Clock clock, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    Timer timer;
    const double c0 = thread_cpu_seconds();
    f();
    t.push_back(clock == Clock::kThreadCpu ? thread_cpu_seconds() - c0 : timer.seconds());
  }
  return median(std::move(t));
}

}  // namespace herd::measure
