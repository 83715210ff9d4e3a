// Built when MPI is absent: the benchmark then measures the local backend only.
#include "comm_bench.h"

namespace herd::bench {
Json run_mpi_child(const Sweep&) { return Json::array(); }
bool mpi_bench_available() { return false; }
}  // namespace herd::bench
