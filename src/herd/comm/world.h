// The backends: `local` (ranks as threads; see local/local_world.h), `mpi` (one rank per process,
// started by mpirun or srun --mpi=pmix) and `gloo` (one rank per process, started by torchrun or srun
// without PMIx; gloo/gloo_communicator.h). `herd train` picks one from how the process was started
// (core/launch_env.h, train::resolve_launch).
#pragma once

#include <memory>
#include <string>

#include "herd/comm/communicator.h"

namespace herd::comm {

enum class Backend { kLocal, kMpi, kGloo };
const char* backend_name(Backend b);  // "local", "mpi", "gloo"
Result<Backend> parse_backend(const std::string& name);
bool mpi_compiled_in();
bool gloo_compiled_in();

// This process's world communicator over MPI, or an error when herd was built without MPI.
Result<std::unique_ptr<Communicator>> make_mpi_world(const CommOptions& options);

// Where and how the processes of a gloo job meet (gloo/gloo_communicator.h).
struct Rendezvous {
  int rank = 0;
  int size = 1;
  std::string dir;      // the meeting directory: storage every host of the job sees
  std::string job_key;  // unique to this start of the job (the launcher's job, step and restart count)
  std::string iface;    // the network interface to listen on (GLOO_SOCKET_IFNAME); empty: the host name's
};

// This process's world communicator over gloo, or an error when herd was built without gloo.
Result<std::unique_ptr<Communicator>> make_gloo_world(const CommOptions& options, const Rendezvous& rv);

// Ends every process of this job at once with `code`, for a rank that failed on its own while its peers
// may be waiting for it in a collective: without it they would wait out the collective timeout. mpi:
// MPI_Abort (returns when MPI is not running); gloo: this process exits, and its peers see the
// connection close; local: returns (the ranks are threads of this process, which returns the error).
void abort_job(Backend backend, int code);

}  // namespace herd::comm
