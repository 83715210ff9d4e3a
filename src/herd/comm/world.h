// The backends: `local` (ranks as threads; see local/local_world.h) or `mpi` (one rank per process,
// started by mpirun or srun --mpi=pmix). `herd train` picks one from how the process was started
// (core/launch_env.h, train::resolve_launch).
#pragma once

#include <memory>
#include <string>

#include "herd/comm/communicator.h"

namespace herd::comm {

enum class Backend { kLocal, kMpi };
const char* backend_name(Backend b);  // "local", "mpi"
Result<Backend> parse_backend(const std::string& name);
bool mpi_compiled_in();

// This process's world communicator over MPI, or an error when herd was built without MPI.
Result<std::unique_ptr<Communicator>> make_mpi_world(const CommOptions& options);

// Ends every process of this MPI job at once (MPI_Abort with `code`), for a rank that failed on its own
// while its peers may be waiting for it in a collective, which cannot be cancelled: without it they
// wait out the collective timeout, and this process blocks in MPI_Finalize. Returns when MPI is not
// running (built without it, not initialised, or finalised).
void abort_mpi_job(int code);

}  // namespace herd::comm
