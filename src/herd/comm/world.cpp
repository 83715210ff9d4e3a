#include "herd/comm/world.h"

// The one place outside comm/mpi/ and comm/gloo/ that knows whether those backends were compiled
// (HERD_HAVE_MPI and HERD_HAVE_GLOO are set on herd_comm by cmake/HerdExternal.cmake).
#if HERD_HAVE_MPI
#include "herd/comm/mpi/mpi_communicator.h"
#endif
#if HERD_HAVE_GLOO
#include "herd/comm/gloo/gloo_communicator.h"
#endif

namespace herd::comm {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kMpi: return "mpi";
    case Backend::kGloo: return "gloo";
    case Backend::kLocal: break;
  }
  return "local";
}

Result<Backend> parse_backend(const std::string& name) {
  if (name == "local") return Backend::kLocal;
  if (name == "mpi") return Backend::kMpi;
  if (name == "gloo") return Backend::kGloo;
  return make_error("comm backend '", name, "' is unknown; use local, mpi or gloo");
}

bool mpi_compiled_in() {
#if HERD_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool gloo_compiled_in() {
#if HERD_HAVE_GLOO
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

Result<std::unique_ptr<Communicator>> make_gloo_world(const CommOptions& options, const Rendezvous& rv) {
#if HERD_HAVE_GLOO
  return gloo::make_world(options, rv);
#else
  (void)options;
  (void)rv;
  return make_error("herd was built without gloo; install libgloo-dev and reconfigure");
#endif
}

void abort_job(Backend backend, int code) {
#if HERD_HAVE_MPI
  if (backend == Backend::kMpi) mpi::abort_job(code);
#endif
#if HERD_HAVE_GLOO
  if (backend == Backend::kGloo) gloo::abort_job(code);
#endif
  (void)backend;
  (void)code;
}

}  // namespace herd::comm
