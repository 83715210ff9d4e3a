// herd's entry point: the libraries' load-time settings (OpenMP wait policy, OpenBLAS kernels) and the
// allocator policy of a training process, then the CLI (cli/app.h).
#include <malloc.h>

#include "herd/cli/app.h"
#include "herd/kernels/library_env.h"

int main(int argc, char** argv) {
  // First: libgomp and OpenBLAS read their settings only when they load, so herd may re-execute itself
  // here; only for a command that runs the kernels in this process (cli::runs_kernels says why).
  if (herd::cli::runs_kernels(argc, argv)) herd::kernels::settle_library_env(argv);
#ifdef __GLIBC__
  // Training frees and reallocates the same large buffers every micro-batch (FSDP's gathered units
  // and gradient buffers, pipeline and CP scratch). With glibc's defaults a rank thread's arena gives
  // them back to the kernel and the next step faults every page in again: 117 MB per step on
  // dp2 of the tiny model, 7% of its step. One arena whose freed memory stays with the process
  // keeps them (docs/projection.md measures it).
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  return herd::cli::run_cli(argc, argv);
}
