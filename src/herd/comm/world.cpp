#include "herd/comm/world.h"

// The one place outside comm/mpi/ that knows whether the MPI backend was compiled (HERD_HAVE_MPI is
// set on herd_comm by cmake/HerdExternal.cmake when MPI is found).
#if HERD_HAVE_MPI
#include "herd/comm/mpi/mpi_communicator.h"
#endif

namespace herd::comm {

const char* backend_name(Backend b) { return b == Backend::kMpi ? "mpi" : "local"; }

Result<Backend> parse_backend(const std::string& name) {
  if (name == "local") return Backend::kLocal;
  if (name == "mpi") return Backend::kMpi;
  return make_error("comm backend '", name, "' is unknown; use local or mpi");
}

bool mpi_compiled_in() {
#if HERD_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Communicator>> make_mpi_world(const CommOptions& options) {
#if HERD_HAVE_MPI
  return mpi::make_world(options);
#else
  (void)options;
  return make_error("herd was built without MPI; install libopenmpi-dev and openmpi-bin and reconfigure");
#endif
}

void abort_mpi_job(int code) {
#if HERD_HAVE_MPI
  mpi::abort_job(code);
#else
  (void)code;
#endif
}

}  // namespace herd::comm
