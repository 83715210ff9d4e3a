// The calling thread's scheduler clock: the CPU time it has run and the time it has waited, runnable, for
// a core (the run queue), in one reading.
//
// The straggler watch (train/step/straggler_monitor.h) splits a rank's step with these: the wall time outside
// collectives is the CPU time it computed, the time it waited for a core that other threads held (an
// oversubscribed host's scheduling, which every rank there suffers in turn), and the rest: the time it
// was off the CPU without wanting one (stopped, sleeping, blocked on I/O or a lock), a stall. Linux
// counts the queued time per thread in /proc/thread-self/schedstat (the second field, nanoseconds; each
// thread reads its own through a file it opens once), and the CPU time through the thread's CPU clock
// (the first field of that file lags the running slice). Where the file is absent (a kernel without
// scheduler statistics) the queued time is 0, so a descheduled thread's waiting then counts as a stall.
#pragma once

namespace herd::measure {

struct ThreadClock {
  double cpu_s = 0;     // seconds this thread has run on a CPU
  double queued_s = 0;  // seconds it has been runnable but waiting for a CPU
};

// This thread's clocks now. A few microseconds (a pread of a /proc file and a clock_gettime).
ThreadClock thread_clock();
// Whether thread_clock() measures the queued time on this host (false: it reads 0).
bool thread_clock_has_queue();

}  // namespace herd::measure
