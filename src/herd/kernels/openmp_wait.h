// How long an idle OpenMP thread spins before it sleeps: chosen for the host before libgomp starts.
//
// libgomp reads its wait policy from the environment once, when the library loads (before main), and
// by default spins about 3 ms at every barrier before it sleeps. A rank whose team shares a core with
// another job then spends its time slices spinning while its partner thread waits for the core (8x
// slower beside one busy loop, docs/projection.md). Sleeping at once (OMP_WAIT_POLICY=passive) costs a
// futex wake-up at every barrier instead (21% on a quiet host). herd sets a spin budget between the
// two, from the job's processes, threads and the host's cores, and re-executes itself once so that
// libgomp sees it (kernels/library_env.h). A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept as given.
#pragma once

#include <string>

namespace herd::kernels {

struct SpinChoice {
  long long spin_count = 0;  // GOMP_SPINCOUNT: busy-wait iterations before a thread sleeps
  std::string reason;
};

// The budget for `processes` herd processes of `threads` OpenMP threads each on a host of `cores`
// cores, `busy_cores` of which other jobs were using just before the start: no spinning when the
// threads outnumber the cores (a spinning thread holds a core its partner needs); a short spin (about
// 13 us) when another job holds a core the threads need; else about 0.4 ms, which covers most of
// herd's barriers on idle cores (a thread that sleeps costs its region a wake-up). A job that arrives
// after the start meets the quiet budget: 1.17x the lost core's share on the tiny model, where
// libgomp's own 3 ms default costs 2.05x (docs/projection.md).
SpinChoice choose_spin(int cores, int processes, int threads, double busy_cores = 0);

// Cores' worth of CPU other processes spent over a 50 ms sample of /proc/stat (steal included; this
// process's own threads taken out); 0 where unreadable.
double busy_cores_now();

// When this process has not settled it yet and neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set:
// sets GOMP_SPINCOUNT to choose_spin's budget for this host (the processes from the launcher's
// environment, the threads from OMP_NUM_THREADS or herd's default) and returns true; the caller
// re-executes the program (settle_library_env). False when nothing changed.
bool set_openmp_wait_env();
// Takes back what set_openmp_wait_env set, when the re-execution failed.
void unset_openmp_wait_env();

// The policy in force, for the log: "OpenMP wait: spin budget 3000 (...)" or the user's setting.
std::string openmp_wait_description();

}  // namespace herd::kernels
