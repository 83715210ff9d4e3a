// Host accounting from /proc: how busy this machine's cores are, and how much of that is this job.
//
// The projection (train/plan/projection.h) and `herd calibrate` read the host through these: the number of
// other jobs competing for the cores before a run starts (runnable scheduling groups, weighted as CFS
// weighs them), and the CPU time the host and this job used between two instants (the background
// load over a run, measured rather than inferred). Linux only; every reader degrades to "unknown"
// (0, -1 or ok = false) where /proc is unreadable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace herd::measure {

// The fields of a /proc stat file after the command name (which may hold spaces and parentheses):
// [0] is field 3 (the state), [1] field 4 (the parent), [11] and [12] fields 14 and 15 (utime and
// stime), [16] field 19 (nice). Empty when the file is gone (the process exited).
std::vector<std::string> stat_fields(const std::filesystem::path& file);

// Every /proc/PID directory except this process's.
std::vector<std::filesystem::path> other_processes();

// Other jobs competing for this host's cores right now: scheduling groups (autogroups, one per
// session; processes when the kernel does not group) other than this process's with a runnable
// thread, each weighted by CFS's 1.25^-nice, averaged over `samples` scans of /proc 10 ms apart.
// 0 where /proc is unreadable.
double sample_background_jobs(int samples = 20);

// CPU time on this host: every core's busy time since boot (steal included: a hypervisor's other
// guests take the cores too) and this job's own, at one wall-clock instant. The job is this process
// and its sibling ranks (processes of the same parent running the same executable: mpirun's), kept
// per process so that a sibling that exits between two readings does not take its CPU time back out
// of the job's (job_seconds_between).
struct HostCpuTimes {
  double wall_s = 0;
  double busy_s = 0;
  std::map<std::int64_t, double> processes;  // pid -> CPU seconds since it started
  bool ok = false;                           // false where /proc is unreadable
};
HostCpuTimes host_cpu_times();

// The job's CPU seconds between two readings: each process's growth, a process first seen in `b`
// counted whole (it started after `a`), one gone by `b` counted for nothing (its last CPU is lost, a
// few ticks at most). -1 when either reading failed.
double job_seconds_between(const HostCpuTimes& a, const HostCpuTimes& b);

// The background load between two readings, as host_share's background_jobs: the other jobs took
// X = (busy - job) / wall cores' worth, leaving the job cores - X, which host_share's fair-share rule
// cores / (1 + B) gives for B = X / (cores - X). Measured, not inferred from runnable threads, so a
// short-lived process counts only for the CPU it used. -1 when either reading failed or no time passed.
double background_jobs_between(const HostCpuTimes& a, const HostCpuTimes& b, std::int64_t cores);

// The 1-minute load average (/proc/loadavg); 0 where unreadable.
double load_average();

}  // namespace herd::measure
