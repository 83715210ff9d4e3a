// The OpenMP spin budget of a herd process (openmp_wait.h).
#include "herd/kernels/openmp_wait.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace herd::kernels {
namespace {

// Busy-wait iterations of a balanced barrier's budget. libgomp counts about 100,000 iterations per
// millisecond, so this is about 10 microseconds: as long as the threads of a balanced parallel region
// take to meet on idle cores, short against a time slice. Measured on the tiny model, 1 rank x 2
// threads, 2 cores (docs/projection.md): beside a busy loop 1.10 s per step (libgomp's default: 8.43 s,
// passive 1.06 s), on a quiet host within 1-4% of the default (passive: 4-14% slower).
constexpr long long kSpinBudget = 1000;
// Set on the re-executed process, so that it does not re-execute again, and read for the log line.
constexpr const char* kMarker = "HERD_OPENMP_WAIT";

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end != v && x > 0 && x < (1 << 20)) ? static_cast<int>(x) : fallback;
}

int host_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

// herd processes started on this host by the launcher: Open MPI, MPICH/Hydra or Slurm say how many.
int local_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const int n = env_int(name, 0);
    if (n > 0) return n;
  }
  return 1;
}

}  // namespace

SpinChoice choose_spin(int cores, int processes, int threads) {
  cores = std::max(1, cores);
  processes = std::max(1, processes);
  threads = std::max(1, threads);
  const long long used = static_cast<long long>(processes) * threads;
  const std::string shape = std::to_string(processes) + (processes == 1 ? " process" : " processes") + " x " +
                            std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " on " +
                            std::to_string(cores) + (cores == 1 ? " core" : " cores");
  if (used > cores) return {0, shape + ": more threads than cores, so a waiting thread sleeps at once"};
  return {kSpinBudget, shape + ": about 10 us of spinning, then sleep"};
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
  const SpinChoice c = choose_spin(cores, processes, threads);
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
