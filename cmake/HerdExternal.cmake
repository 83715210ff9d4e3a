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

# NCCL (the CUDA toolkit's NCCL): comm/nccl/ is compiled into its own library, herd_comm_nccl, when
# the toolkit and libnccl are found, so herd_comm and everything above it still build without CUDA.
# Its sources are plain C++ against cuda_runtime.h and nccl.h; no nvcc is needed.
option(HERD_ENABLE_NCCL "Build the NCCL communicator backend when CUDA and NCCL are found" ON)
set(HERD_HAVE_NCCL OFF)
if(HERD_ENABLE_NCCL)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_library(HERD_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                 ${CUDAToolkit_TARGET_DIR}/lib)
    find_path(HERD_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(CUDAToolkit_FOUND AND HERD_NCCL_LIBRARY AND HERD_NCCL_INCLUDE_DIR)
    set(HERD_HAVE_NCCL ON)
    file(GLOB herd_nccl_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/herd/comm/nccl/*.cpp)
    add_library(herd_comm_nccl STATIC ${herd_nccl_sources})
    target_include_directories(herd_comm_nccl PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src ${HERD_NCCL_INCLUDE_DIR})
    target_link_libraries(herd_comm_nccl PUBLIC herd_comm CUDA::cudart ${HERD_NCCL_LIBRARY})
    message(STATUS "herd: CUDA ${CUDAToolkit_VERSION} and NCCL (${HERD_NCCL_LIBRARY}) found; building comm/nccl")
  else()
    message(STATUS "herd: CUDA toolkit or NCCL not found; comm/nccl is skipped")
  endif()
endif()
