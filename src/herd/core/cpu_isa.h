// Which vector instruction set herd's own CPU kernels (kernels/cpu/) run with, and the attribute that
// gives them one.
//
// The default build is portable x86-64: every hot kernel is compiled three times by GCC function
// multiversioning (HERD_CPU_CLONES, `target_clones`), for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA)
// and the x86-64 baseline (SSE2), and the loader picks one per function from the CPU it runs on (an
// ifunc resolver, once at start-up; no per-call cost beyond an indirect call). The OpenMP regions
// inside a kernel are cloned with it, and the templates it calls (tile_gemm, fast_exp) are inlined
// into each clone, so a clone is the same code -march=<level> would give that function.
// `cmake -DHERD_NATIVE=ON` instead compiles the kernels with -march=native (HERD_CPU_NATIVE): one path,
// for this machine only. `cmake -DHERD_CPU_ISA=x86-64-v3` (or x86-64) compiles them for that level only
// (HERD_CPU_FORCED, -march=<level>, no clones), and kernels/cpu/cpu_features.h reports no instruction set
// above it: on any newer CPU herd then runs exactly the code a CPU of that level runs.
//
// cpu_isa_path() names the path taken, with the same tests as GCC's resolver, for benchmark records
// (bench/common/bench_json.h) and logs. tests/kernels run the kernels on every path (tests/CMakeLists.txt,
// under qemu-x86_64 for the levels the host CPU exceeds).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(HERD_CPU_NATIVE) && \
    !defined(HERD_CPU_FORCED)
#define HERD_CPU_DISPATCH 1
#define HERD_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HERD_CPU_DISPATCH 0
#define HERD_CPU_CLONES
#endif

namespace herd {

// "x86-64-v4", "x86-64-v3" or "x86-64" (runtime dispatch, or the level -DHERD_CPU_ISA forced), "native"
// (-DHERD_NATIVE=ON), or "generic" (another architecture or compiler: one path, the compiler's default).
inline const char* cpu_isa_path() {
#if HERD_CPU_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3";
  return "x86-64";
#elif defined(HERD_CPU_FORCED)
  return HERD_CPU_FORCED;
#elif defined(HERD_CPU_NATIVE)
  return "native";
#else
  return "generic";
#endif
}

}  // namespace herd
