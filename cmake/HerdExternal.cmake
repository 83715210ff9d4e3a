# Optional third-party libraries (BLAS, MPI, CUDA). Later folders add their find_package calls here
# and set HERD_EXTERNAL_<folder> / HERD_HAVE_<thing>.

# data/: PCRE2 (UTF + UCP + JIT) defines the Llama 3 pre-split; liblzma reads .xz corpora and
# computes shard checksums (CRC-32). Debian: libpcre2-dev, liblzma-dev, pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HERD_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(HERD_LZMA REQUIRED IMPORTED_TARGET liblzma)
list(APPEND HERD_EXTERNAL_data PkgConfig::HERD_PCRE2 PkgConfig::HERD_LZMA)

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

# herd's own CPU kernels (attention, norms, softmax) use OpenMP for threads and `omp simd` for
# vectorised reductions, and are compiled for the host's vector ISA (AVX-512 on the reference machine).
find_package(OpenMP REQUIRED COMPONENTS CXX)
option(HERD_NATIVE "Compile the runtime kernels for the host CPU (-march=native)" ON)
add_library(herd_cpu_flags INTERFACE)
if(HERD_NATIVE)
  target_compile_options(herd_cpu_flags INTERFACE -march=native -mprefer-vector-width=512)
endif()
list(APPEND HERD_EXTERNAL_kernels herd_openblas OpenMP::OpenMP_CXX herd_cpu_flags)
