// The CPU's vector instruction sets, read from CPUID (the same bits with GCC and clang, whose
// __builtin_cpu_supports names differ by version), for the choices the kernels' libraries are given:
// oneDNN's bf16 matmul (gemm.cpp) and OpenBLAS's kernel set (library_env.cpp).
#pragma once

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace herd::kernels::cpu {

struct CpuFeatures {
  bool avx2_fma = false;  // AVX2 and FMA: x86-64-v3's arithmetic
  bool avx512 = false;    // AVX-512 F, BW, DQ and VL: x86-64-v4's
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};

// In a build for one level (-DHERD_CPU_ISA, core/cpu_isa.h) no set above that level counts: the
// kernels' bf16 micro-GEMMs, AMX and oneDNN's bf16 matmul are then off as on a CPU of that level.
//
// Each set counts only when the OS saves its registers (XCR0: bits 1-2 for AVX, 5-7 for AVX-512);
// oneDNN asks Linux for the AMX tile state itself. Leaf 7 subleaf 0: EBX bit 5 AVX2, 16 AVX512F,
// 17 DQ, 30 BW, 31 VL; EDX bit 22 AMX-BF16. Subleaf 1: EAX bit 5 AVX512_BF16. Leaf 1: ECX bit 12 FMA.
inline CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return f;
#if defined(HERD_CPU_FORCED) && !defined(__AVX2__)
  return f;  // the x86-64 baseline: SSE2
#endif
  const bool fma = (c & bit_FMA) != 0;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6u) != 0x6u) return f;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return f;
  f.avx2_fma = fma && (b & (1u << 5)) != 0;
  if ((xcr0_lo & 0xE6u) != 0xE6u) return f;
  constexpr unsigned kAvx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  f.avx512 = (b & kAvx512) == kAvx512;
  f.amx_bf16 = ((d >> 22) & 1u) != 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) != 0) f.avx512_bf16 = ((a >> 5) & 1u) != 0;
#if defined(HERD_CPU_FORCED) && !defined(__AVX512F__)
  f.avx512 = f.avx512_bf16 = f.amx_bf16 = false;
#endif
#endif
  return f;
}

}  // namespace herd::kernels::cpu
