// The cores this process may run on: the CPUs of its affinity mask (what `nproc` prints, what OpenMP's
// default team and `taskset`, cgroup cpusets and mpirun's binding give it), not every CPU the machine
// has online (std::thread::hardware_concurrency). herd sizes its thread teams and rank counts, and
// relates its measurements to peaks, by this number.
#pragma once

namespace herd {

// At least 1.
int usable_cores();

}  // namespace herd
