# Optional third-party libraries (BLAS, MPI, CUDA). Later folders add their find_package calls here
# and set HERD_EXTERNAL_<folder> / HERD_HAVE_<thing>.

# MPI (OpenMPI from Debian: libopenmpi-dev, openmpi-bin). comm/mpi/ is compiled only when it is
# found; herd_comm then carries HERD_HAVE_MPI=1 so the backend factory in comm/world.cpp can offer it.
option(HERD_ENABLE_MPI "Build the MPI communicator backend when MPI is found" ON)
set(HERD_HAVE_MPI OFF)
if(HERD_ENABLE_MPI)
  # The project enables only CXX; the C API is used through the CXX component without the
  # deprecated C++ bindings.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(HERD_HAVE_MPI ON)
    add_library(herd_mpi_flag INTERFACE)
    target_compile_definitions(herd_mpi_flag INTERFACE HERD_HAVE_MPI=1)
    list(APPEND HERD_EXTERNAL_comm MPI::MPI_CXX herd_mpi_flag)
    message(STATUS "herd: MPI found (${MPI_CXX_LIBRARIES}); building comm/mpi and the mpirun tests")
  else()
    message(STATUS "herd: MPI not found; comm/mpi and its tests are skipped (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
