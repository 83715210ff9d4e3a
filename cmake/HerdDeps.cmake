# The dependency table of ARCHITECTURE.md, in one place.
#
# Each folder under src/herd/ is one library, herd_<folder>, that links exactly the folders listed for
# it here. cmake/check_includes.cmake (ctest dependency_table.*) reads the same table and fails when a
# source or test includes a folder that is not listed, so this file, the build graph and the design
# document cannot drift apart.
# Folders are listed in dependency order (a folder only names folders above it).

set(HERD_FOLDERS core model topology schedule planner tensor kernels nn comm measure parallel data train cli)

set(HERD_DEPS_core "")
set(HERD_DEPS_model core)
set(HERD_DEPS_topology core)
set(HERD_DEPS_schedule core)
set(HERD_DEPS_planner core model topology schedule)
set(HERD_DEPS_tensor core)
set(HERD_DEPS_kernels core tensor)
set(HERD_DEPS_nn core tensor kernels model)
set(HERD_DEPS_comm core tensor topology)
set(HERD_DEPS_measure core comm)
set(HERD_DEPS_parallel core tensor kernels nn comm topology schedule model)
set(HERD_DEPS_data core model topology)
set(HERD_DEPS_train core model topology schedule planner tensor kernels nn comm measure parallel data)
set(HERD_DEPS_cli ${HERD_FOLDERS})
list(REMOVE_ITEM HERD_DEPS_cli cli)

# The planner half is pure computation: these folders may not include BLAS, MPI or CUDA headers.
set(HERD_PURE_FOLDERS core model topology schedule planner)
set(HERD_FORBIDDEN_IN_PURE "cblas.h" "mpi.h" "cuda.h" "cuda_runtime.h" "nccl.h" "cublas_v2.h" "dnnl.hpp")
