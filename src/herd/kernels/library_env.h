// Settings that the libraries under herd's kernels read once, when they load (before main), chosen
// for this host at process start: libgomp's spin budget (openmp_wait.h) and OpenBLAS's kernel set.
//
// OpenBLAS (Debian's build carries every x86 kernel set and picks one from the CPU model at load)
// does not know CPU models newer than its release and then falls back to Prescott's SSE3 kernels:
// Debian 12's OpenBLAS 0.3.21 on an Emerald Rapids Xeon (family 6, model 207) ran herd's transposed
// GEMMs at a quarter of the AVX-512 kernels' rate, and the tiny model's one-thread training step took
// 3.9-4.8 s instead of 1.0-1.1 s (docs/kernels.md). herd then names the kernel set the CPU's
// instructions call for in OPENBLAS_CORETYPE. Either setting makes herd re-execute itself once, so the
// libraries see it; a user's own OPENBLAS_CORETYPE, OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace herd::kernels {

// The instruction-set level an OpenBLAS kernel set (openblas_get_corename()) or a CPU is written for:
// 0 SSE only, 1 AVX, 2 AVX2 + FMA, 3 AVX-512; -1 for a name this list does not know (a newer OpenBLAS's).
int blas_core_level(const std::string& core);

struct BlasCoreChoice {
  std::string core;  // for OPENBLAS_CORETYPE; empty: keep what OpenBLAS chose
  std::string reason;
};
// OpenBLAS chose `detected` for a CPU of instruction-set level `cpu_level` (with AVX512_BF16 or not).
// Only a fallback is overridden: a detected SSE-only set (OpenBLAS did not recognise the CPU) on a CPU
// with AVX2 or better gets Cooperlake (AVX-512 with BF16), SkylakeX (AVX-512) or Haswell (AVX2). A set
// OpenBLAS picked for a CPU it knows, or a name unknown here, is kept.
BlasCoreChoice choose_blas_core(const std::string& detected, int cpu_level, bool avx512_bf16);

// A build for one x86-64 level (cmake -DHERD_CPU_ISA, core/cpu_isa.h) holds its libraries to that level
// too: ONEDNN_MAX_CPU_ISA (AVX2 for x86-64-v3, SSE41 for x86-64) and OPENBLAS_CORETYPE (Haswell,
// Nehalem). The (name, value) pairs; none in a build with runtime dispatch. settle_library_env sets each
// one the user has not set; tests/CMakeLists.txt sets the same for every test of such a build.
std::vector<std::pair<std::string, std::string>> forced_isa_library_env();

// At process start, before anything else: sets what forced_isa_library_env, set_openmp_wait_env and
// choose_blas_core ask for and re-executes this program once when any of them changed something.
// Returns at once otherwise, and when the re-execution fails (the libraries keep their own choices).
void settle_library_env(char** argv);

// A user's own OPENBLAS_CORETYPE naming kernels below the CPU's level (Haswell on an AVX-512 CPU): the
// warning appended to the header line ("" when the set matches the CPU, or is unknown). The setting is
// still kept (the user may have a reason); herd says what it costs.
std::string user_core_note(const std::string& core, int cpu_level);

// For the run's header: "OpenBLAS kernels: Cooperlake (...)", "... as detected" or the user's setting.
std::string blas_core_description();

}  // namespace herd::kernels
