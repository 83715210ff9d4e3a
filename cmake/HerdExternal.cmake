# Optional third-party libraries (BLAS, MPI, CUDA). Later folders add their find_package calls here
# and set HERD_EXTERNAL_<folder> / HERD_HAVE_<thing>.

# kernels/: OpenBLAS through cblas (docs/blas.md: measured against oneDNN and BLIS on this CPU; it is
# as fast and the only one that holds up when ranks share cores). The pthread build's cblas.h also
# declares openblas_set_num_threads, which kernels/ uses to size the BLAS thread pool.
find_path(HERD_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include
  PATH_SUFFIXES openblas-pthread openblas NO_DEFAULT_PATH)
find_library(HERD_OPENBLAS_LIB NAMES openblas)
if(NOT HERD_OPENBLAS_INCLUDE OR NOT HERD_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found (cblas.h: ${HERD_OPENBLAS_INCLUDE}, lib: ${HERD_OPENBLAS_LIB}); "
                      "install libopenblas-dev (scripts/setup.sh)")
endif()
add_library(herd_openblas INTERFACE)
target_include_directories(herd_openblas SYSTEM INTERFACE ${HERD_OPENBLAS_INCLUDE})
target_link_libraries(herd_openblas INTERFACE ${HERD_OPENBLAS_LIB})

# oneDNN's sgemm serves the non-transposed float GEMMs on one thread (kernels/gemm.h, docs/blas.md).
# Optional: without it every GEMM goes to OpenBLAS.
find_path(HERD_DNNL_INCLUDE oneapi/dnnl/dnnl.h)
find_library(HERD_DNNL_LIB NAMES dnnl)
option(HERD_USE_DNNL "Use oneDNN's sgemm where it is faster than OpenBLAS" ON)
if(HERD_USE_DNNL AND HERD_DNNL_INCLUDE AND HERD_DNNL_LIB)
  target_include_directories(herd_openblas SYSTEM INTERFACE ${HERD_DNNL_INCLUDE})
  target_link_libraries(herd_openblas INTERFACE ${HERD_DNNL_LIB})
  target_compile_definitions(herd_openblas INTERFACE HERD_HAVE_DNNL)
  set(HERD_HAVE_DNNL ON)
endif()

# herd's own CPU kernels (attention, norms, softmax) use OpenMP for threads and `omp simd` for
# vectorised reductions. The default build is portable x86-64: the hot kernels carry GCC target_clones
# (core/cpu_isa.h) and run the AVX-512, AVX2 or baseline clone the CPU supports, so one binary (and
# one benchmark record) means the same on every x86-64 machine. HERD_NATIVE=ON compiles everything
# that links the kernels for the build host instead (-march=native, one path, not portable).
find_package(OpenMP REQUIRED COMPONENTS CXX)
option(HERD_NATIVE "Compile for the build host's CPU (-march=native) instead of runtime ISA dispatch" OFF)
add_library(herd_cpu_flags INTERFACE)
# Prefer 512-bit vectors where AVX-512 is enabled (the x86-64-v4 clone, or a native AVX-512 host).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(herd_cpu_flags INTERFACE -mprefer-vector-width=512)
endif()
# The kernels never read errno after a math call. With errno kept, GCC leaves every `omp simd` loop that
# calls std::sqrt scalar (vsqrtss and a call for negative inputs): AdamW ran one element at a time.
# sqrt is correctly rounded either way; what moves is FMA contraction, which the errno branch had split
# (the scalar AdamW update subtracted after a separate multiply, the vector one fuses them), so AdamW's
# results differ from the scalar loop's in the last bit. No other libm call is affected (vector libm
# needs -ffast-math, which herd does not use).
target_compile_options(herd_cpu_flags INTERFACE -fno-math-errno)
if(HERD_NATIVE)
  # Defined for every target, so that all translation units agree on the kernels' build mode.
  add_compile_options(-march=native)
  add_compile_definitions(HERD_CPU_NATIVE=1)
endif()
# HERD_CPU_ISA=x86-64-v3 or x86-64 compiles everything for that one level (no clones) and caps what herd
# uses of the CPU at it: its bf16 micro-kernels and AMX count only where the level has them, oneDNN is
# held to the level (ONEDNN_MAX_CPU_ISA) and OpenBLAS runs its kernel set (OPENBLAS_CORETYPE), both set
# at start (kernels/library_env.h) and for every test (tests/CMakeLists.txt). The whole suite then runs
# the path a CPU of that level takes, at the host's native speed (docs/kernels.md).
set(HERD_CPU_ISA "" CACHE STRING "Compile herd for one x86-64 level (x86-64-v3 or x86-64) instead of runtime dispatch")
set_property(CACHE HERD_CPU_ISA PROPERTY STRINGS "" x86-64-v3 x86-64)
if(HERD_CPU_ISA)
  if(NOT HERD_CPU_ISA MATCHES "^(x86-64-v3|x86-64)$")
    message(FATAL_ERROR "HERD_CPU_ISA=${HERD_CPU_ISA}: use x86-64-v3 (AVX2 + FMA), x86-64 (SSE2) or leave it empty "
                        "(runtime dispatch)")
  endif()
  if(HERD_NATIVE)
    message(FATAL_ERROR "HERD_CPU_ISA=${HERD_CPU_ISA} and HERD_NATIVE=ON each choose the ISA: set one")
  endif()
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    message(FATAL_ERROR "HERD_CPU_ISA=${HERD_CPU_ISA} names an x86-64 level; this build is for ${CMAKE_SYSTEM_PROCESSOR}")
  endif()
  add_compile_options(-march=${HERD_CPU_ISA})
  add_compile_definitions(HERD_CPU_FORCED="${HERD_CPU_ISA}")
  if(HERD_CPU_ISA STREQUAL "x86-64-v3")
    set(HERD_CPU_ISA_ENV "ONEDNN_MAX_CPU_ISA=AVX2;OPENBLAS_CORETYPE=Haswell")
  else()
    set(HERD_CPU_ISA_ENV "ONEDNN_MAX_CPU_ISA=SSE41;OPENBLAS_CORETYPE=Nehalem")
  endif()
endif()
list(APPEND HERD_EXTERNAL_kernels herd_openblas OpenMP::OpenMP_CXX herd_cpu_flags)

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

# gloo (Debian's libgloo-dev): the backend of jobs whose launcher is not MPI (torchrun, srun without
# PMIx). comm/gloo/ is compiled only when it is found; herd_comm then carries HERD_HAVE_GLOO=1.
option(HERD_ENABLE_GLOO "Build the gloo communicator backend when gloo is found" ON)
set(HERD_HAVE_GLOO OFF)
if(HERD_ENABLE_GLOO)
  find_package(Gloo QUIET CONFIG)
  if(TARGET gloo)
    set(HERD_HAVE_GLOO ON)
    add_library(herd_gloo_flag INTERFACE)
    target_compile_definitions(herd_gloo_flag INTERFACE HERD_HAVE_GLOO=1)
    list(APPEND HERD_EXTERNAL_comm gloo herd_gloo_flag)
    message(STATUS "herd: gloo found; building comm/gloo (torchrun and srun without PMIx)")
  else()
    message(STATUS "herd: gloo not found; comm/gloo is skipped (apt-get install libgloo-dev)")
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
# data/: PCRE2 (UTF + UCP + JIT) defines the Llama 3 pre-split; liblzma reads .xz corpora and
# computes shard checksums (CRC-32). Debian: libpcre2-dev, liblzma-dev, pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HERD_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(HERD_LZMA REQUIRED IMPORTED_TARGET liblzma)
list(APPEND HERD_EXTERNAL_data PkgConfig::HERD_PCRE2 PkgConfig::HERD_LZMA)

# CUDA (the toolkit's nvcc, cudart and cuBLASLt): kernels/cuda/ is compiled into its own library,
# herd_kernels_cuda, whenever nvcc is found, so every build on a machine with the toolkit compiles the
# GPU backend (with warnings as errors under HERD_WERROR) although no GPU may be present; herd_kernels
# and everything above it build without it. The herd binary and the tests link it whole (its backend
# registers itself at load time: kernels/device.h), so no source outside kernels/cuda/ needs an
# #ifdef. The sanitizer and fuzz builds leave it out (HERD_ENABLE_CUDA=OFF in scripts/test.sh and
# scripts/fuzz.sh): nvcc takes neither instrumentation, and no GPU code runs on these machines anyway.
# Architectures: sm_90 (H100, H200) by default; CMAKE_CUDA_ARCHITECTURES overrides.
option(HERD_ENABLE_CUDA "Build the CUDA kernel backend (kernels/cuda) when nvcc is found" ON)
set(HERD_HAVE_CUDA OFF)
if(HERD_ENABLE_CUDA AND NOT HERD_SANITIZE AND NOT HERD_FUZZ)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    if(HERD_CCACHE_PROGRAM AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${HERD_CCACHE_PROGRAM})
    endif()
    enable_language(CUDA)
    # C++20 as for the C++ sources: CMake 3.25 does not know nvcc 12+ takes -std=c++20, so say it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION -std=c++20)
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION -std=c++20)
    set(CMAKE_CUDA_STANDARD 20)
    find_package(CUDAToolkit REQUIRED)
    set(HERD_HAVE_CUDA ON)
    file(GLOB herd_cuda_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/herd/kernels/cuda/*.cu
         ${CMAKE_CURRENT_SOURCE_DIR}/src/herd/kernels/cuda/*.cpp)
    add_library(herd_kernels_cuda STATIC ${herd_cuda_sources})
    target_include_directories(herd_kernels_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
    target_link_libraries(herd_kernels_cuda PUBLIC herd_kernels CUDA::cudart CUDA::cublasLt)
    # nvcc: the host compiler's -Wall -Wextra, device-side warnings, all as errors under HERD_WERROR.
    set(herd_cuda_warn -Xcompiler=-Wall,-Wextra)
    if(HERD_WERROR)
      list(APPEND herd_cuda_warn -Werror=all-warnings -Xcompiler=-Werror)
    endif()
    target_compile_options(herd_kernels_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${herd_cuda_warn} --expt-relaxed-constexpr
                                                     -lineinfo>)
    set_target_properties(herd_kernels_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
    message(STATUS "herd: nvcc ${CMAKE_CUDA_COMPILER_VERSION} found; building kernels/cuda for sm_${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "herd: nvcc not found; kernels/cuda is skipped (train.device=cuda will say so)")
  endif()
endif()
