// The OpenMP spin budget of a herd process (openmp_wait.h).
#include "herd/kernels/openmp_wait.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "herd/core/cores.h"
#include "herd/core/launch_env.h"
#include "herd/core/proc_stat.h"

namespace herd::kernels {
namespace {

// Busy-wait iterations before a waiting thread sleeps. One iteration of libgomp's wait loop takes
// about 13 ns on an Intel Xeon (AVX-512 + AMX-BF16) (`GOMP_SPINCOUNT=N herd_bench_forkjoin --one-worker`: a thread that
// waits 1 ms at every barrier burns 38 us of CPU per region at 3,000, 130 us at 10,000, 377 us at
// 30,000). Measured on that machine with `bench/projection/spin_budget.sh --budgets N "B..." [busy]`
// (bench/projection/measurements.md, "The spin budget, quiet and beside a job"):
//
// On a quiet host: about 0.4 ms. A thread that sleeps costs its region a wake-up, and herd's regions
// (oneDNN's GEMMs and its own kernels, about 440 a second on the small model, most near 1 ms) leave one
// thread waiting for the other at most barriers. Against libgomp's 3 ms default the small model's bf16
// step on 1 rank x 2 threads ran 1.8-2.2% slower at 30,000, 4.7-6.2% at 1,000 and 3,000.
constexpr long long kQuietSpin = 30000;
// Beside another job that holds a core the team needs (seen at start): about 13 us. The team then
// time-shares one core, and every iteration spun while the partner waits for that core is lost: the
// tiny model's 2-thread step beside a busy loop ran 1.035x its quiet one-thread step at 1,000, 1.17x at
// 30,000 and 2.05x at libgomp's default.
constexpr long long kBusySpin = 1000;
// Set on the re-executed process, so that it does not re-execute again, and read for the log line.
constexpr const char* kMarker = "HERD_OPENMP_WAIT";

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end != v && x > 0 && x < (1 << 20)) ? static_cast<int>(x) : fallback;
}

int host_cores() { return usable_cores(); }

// herd processes started on this host by the launcher (core/launch_env.h); 1 where it says nothing or
// its variables are refused (herd train then reports them).
int local_processes() {
  const Result<LaunchEnv> launch = read_launch_env(process_environment());
  return launch.ok() ? launch->local_size : 1;
}

}  // namespace

double busy_cores_now() {
  // This process's own threads (OpenBLAS's pool spins for a while after it starts) are not another job.
  auto own_cpu_s = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const auto w0 = std::chrono::steady_clock::now();
  const double own0 = own_cpu_s();
  const std::optional<HostTicks> a = read_host_ticks();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::optional<HostTicks> b = read_host_ticks();
  if (!a || !b || b->busy + b->idle <= a->busy + a->idle || b->cpus <= 0) return 0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double own_cores = wall > 0 ? (own_cpu_s() - own0) / wall : 0.0;
  const double host_cores = (b->busy - a->busy) / (b->busy + b->idle - a->busy - a->idle) * b->cpus;
  return std::max(0.0, host_cores - own_cores);
}

SpinChoice choose_spin(int cores, int processes, int threads, double busy_cores) {
  cores = std::max(1, cores);
  processes = std::max(1, processes);
  threads = std::max(1, threads);
  const long long used = static_cast<long long>(processes) * threads;
  const std::string shape = std::to_string(processes) + (processes == 1 ? " process" : " processes") + " x " +
                            std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " on " +
                            std::to_string(cores) + (cores == 1 ? " core" : " cores");
  if (used > cores) return {0, shape + ": more threads than cores, so a waiting thread sleeps at once"};
  // Another job's share of the cores, rounded to the cores it holds (a stray tick is not a job).
  const long long held = std::llround(std::max(0.0, busy_cores));
  if (held > 0 && used + held > cores) {
    return {kBusySpin, shape + ", " + std::to_string(held) + (held == 1 ? " core" : " cores") +
                           " busy with another job: about 13 us of spinning, then sleep"};
  }
  return {kQuietSpin, shape + ": about 0.4 ms of spinning, then sleep"};
}

bool set_openmp_wait_env() {
  if (std::getenv(kMarker) != nullptr) return false;
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    setenv(kMarker, "user", 1);
    return false;
  }
  const int cores = host_cores();
  const int processes = local_processes();
  // herd's default kernel threads per process: the cores shared among the host's processes.
  const int threads = env_int("OMP_NUM_THREADS", std::max(1, cores / processes));
  // Other jobs' load now (a 50 ms sample of /proc/stat), only where it can change the choice.
  const double busy = static_cast<long long>(processes) * threads <= cores ? busy_cores_now() : 0.0;
  const SpinChoice c = choose_spin(cores, processes, threads, busy);
  setenv("GOMP_SPINCOUNT", std::to_string(c.spin_count).c_str(), 1);
  setenv(kMarker, c.reason.c_str(), 1);
  return true;
}

void unset_openmp_wait_env() {
  // No re-execution (no /proc): libgomp keeps its defaults for this process; nothing else changes.
  unsetenv("GOMP_SPINCOUNT");
  setenv(kMarker, "libgomp default (re-execution failed)", 1);
}

std::string openmp_wait_description() {
  const char* marker = std::getenv(kMarker);
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (marker == nullptr) return "OpenMP wait: libgomp default";
  if (std::string(marker) == "user") {
    return std::string("OpenMP wait: as set, ") + (policy != nullptr ? "OMP_WAIT_POLICY=" + std::string(policy) : "") +
           (policy != nullptr && spin != nullptr ? " " : "") +
           (spin != nullptr ? "GOMP_SPINCOUNT=" + std::string(spin) : "");
  }
  if (spin == nullptr) return std::string("OpenMP wait: ") + marker;
  return std::string("OpenMP wait: spin budget ") + spin + " (" + marker + ")";
}

}  // namespace herd::kernels
