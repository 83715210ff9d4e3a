// The host's CPU time counters, the aggregate "cpu" line of /proc/stat: what measure/host.h's
// accounting and the OpenMP spin budget's load sample (kernels/openmp_wait.h) both read. Linux only.
#pragma once

#include <fstream>
#include <optional>
#include <string>

namespace herd {

// Clock ticks (sysconf(_SC_CLK_TCK) per second) since boot, summed over the host's CPUs.
struct HostTicks {
  double busy = 0;  // user + nice + system + irq + softirq + steal (a hypervisor's other guests take the cores too)
  double idle = 0;  // idle + iowait
  int cpus = 0;     // the per-CPU lines that follow
};

// nullopt where /proc/stat is unreadable or not in the expected form.
inline std::optional<HostTicks> read_host_ticks() {
  std::ifstream f("/proc/stat");
  std::string name;
  double v[8] = {};  // user nice system idle iowait irq softirq steal (guest is inside user)
  if (!(f >> name) || name != "cpu") return std::nullopt;
  for (double& x : v) {
    if (!(f >> x)) return std::nullopt;
  }
  HostTicks t;
  t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  t.idle = v[3] + v[4];
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu", 0) == 0) ++t.cpus;
  }
  return t;
}

}  // namespace herd
