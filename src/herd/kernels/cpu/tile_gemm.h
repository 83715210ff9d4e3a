// A register-blocked micro-GEMM for the small tiles of attention (64 x 64 x head_dim).
//
// C (m, n) (+)= A (m, k) * B (k, n), all row-major except A, which is addressed through two strides
// (a_is between rows of op(A), a_ps along k) so the same loop serves A and A^T without a copy. The
// block is MR = 4 rows by two vectors of columns (2 x 16 floats with AVX-512, 2 x 8 with AVX2): per step along k it
// loads two B vectors and four A scalars for eight FMAs, keeping the 8 accumulators in registers.
// Why not the BLAS: a 64 x 64 x 64 call is ~5 us of work, where the call, its argument checks and its
// thread hand-off cost a noticeable fraction, and OpenBLAS called from inside an OpenMP region would
// contend with its own threads. GCC vector extensions keep this portable; the vector width follows the
// instruction set (tile_gemm below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "herd/core/cpu_isa.h"

// Without AVX-512 (the AVX2 and baseline clones of a kernel, core/cpu_isa.h) GCC warns that passing a
// 64-byte vector by value has no stable ABI, at every call of vload/vstore in the including file.
// They are always inlined into the kernel that calls them, so no such value crosses a call boundary;
// the warning is off for the rest of the (kernels/cpu/ only) translation unit that includes this.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace herd::kernels::cpu {

// A vector of `Bytes` bytes of T (GCC vector extensions), and unaligned loads and stores of it.
template <typename T, int Bytes>
struct VecN {
  typedef T type __attribute__((vector_size(Bytes)));
  static constexpr int kLanes = Bytes / static_cast<int>(sizeof(T));
};
template <typename T>
using Vec64 = VecN<T, 64>;

template <typename T, int Bytes = 64>
[[gnu::always_inline]] inline typename VecN<T, Bytes>::type vload(const T* p) {
  typename VecN<T, Bytes>::type v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T, int Bytes = 64>
[[gnu::always_inline]] inline void vstore(T* p, const typename VecN<T, Bytes>::type& v) {
  std::memcpy(p, &v, sizeof v);
}

// The kernel at a vector width of `Bytes` (the widest the instruction set at hand has registers for).
template <typename T, int Bytes>
[[gnu::always_inline]] inline void tile_gemm_body(std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                                                  std::int64_t a_is, std::int64_t a_ps, const T* b, std::int64_t ldb,
                                                  T* c, std::int64_t ldc, bool accumulate) {
  using V = typename VecN<T, Bytes>::type;
  constexpr int L = VecN<T, Bytes>::kLanes;
  constexpr int kMR = 4;
  constexpr int kNR = 2 * L;
  std::int64_t i0 = 0;
  for (; i0 + kMR <= m; i0 += kMR) {
    std::int64_t j0 = 0;
    for (; j0 + kNR <= n; j0 += kNR) {
      V acc[kMR][2];
      for (int r = 0; r < kMR; ++r) {
        if (accumulate) {
          acc[r][0] = vload<T, Bytes>(c + (i0 + r) * ldc + j0);
          acc[r][1] = vload<T, Bytes>(c + (i0 + r) * ldc + j0 + L);
        } else {
          acc[r][0] = V{};
          acc[r][1] = V{};
        }
      }
      const T* ap = a + i0 * a_is;
      for (std::int64_t p = 0; p < k; ++p) {
        const V b0 = vload<T, Bytes>(b + p * ldb + j0);
        const V b1 = vload<T, Bytes>(b + p * ldb + j0 + L);
        for (int r = 0; r < kMR; ++r) {
          const T x = ap[r * a_is + p * a_ps];
          acc[r][0] += x * b0;
          acc[r][1] += x * b1;
        }
      }
      for (int r = 0; r < kMR; ++r) {
        vstore<T, Bytes>(c + (i0 + r) * ldc + j0, acc[r][0]);
        vstore<T, Bytes>(c + (i0 + r) * ldc + j0 + L, acc[r][1]);
      }
    }
    // Column tail: one vector, then scalars.
    for (; j0 + L <= n; j0 += L) {
      V acc[kMR];
      for (int r = 0; r < kMR; ++r) acc[r] = accumulate ? vload<T, Bytes>(c + (i0 + r) * ldc + j0) : V{};
      const T* ap = a + i0 * a_is;
      for (std::int64_t p = 0; p < k; ++p) {
        const V b0 = vload<T, Bytes>(b + p * ldb + j0);
        for (int r = 0; r < kMR; ++r) acc[r] += ap[r * a_is + p * a_ps] * b0;
      }
      for (int r = 0; r < kMR; ++r) vstore<T, Bytes>(c + (i0 + r) * ldc + j0, acc[r]);
    }
    if (j0 < n) {
      for (int r = 0; r < kMR; ++r) {
        T* cr = c + (i0 + r) * ldc;
        if (!accumulate) std::fill(cr + j0, cr + n, T(0));
        for (std::int64_t p = 0; p < k; ++p) {
          const T x = a[(i0 + r) * a_is + p * a_ps];
          for (std::int64_t j = j0; j < n; ++j) cr[j] += x * b[p * ldb + j];
        }
      }
    }
  }
  // Row tail (m % kMR rows).
  for (std::int64_t r = 0; r < m % kMR; ++r) {
    const std::int64_t i = m - m % kMR + r;
    T* cr = c + i * ldc;
    if (!accumulate) std::fill(cr, cr + n, T(0));
    for (std::int64_t p = 0; p < k; ++p) {
      const T x = a[i * a_is + p * a_ps];
      const T* bp = b + p * ldb;
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j) cr[j] += x * bp[j];
    }
  }
}

// One copy per instruction set, each with the vector width its registers hold: 64 bytes with AVX-512,
// 32 with AVX2, 16 with the SSE2 baseline. (With one 64-byte type for all, GCC 12 lowered the AVX2
// copy to scalar code with the accumulators on the stack: attention ran at 1.5% of the GEMM rate on an
// AVX2-only AMD EPYC, docs/kernels.md.) The copy is chosen once, by the same tests as the resolver of
// the kernels' own clones (core/cpu_isa.h).
#if HERD_CPU_DISPATCH
template <typename T>
__attribute__((target("arch=x86-64-v4"))) void tile_gemm_v4(std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                                                            std::int64_t a_is, std::int64_t a_ps, const T* b,
                                                            std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  tile_gemm_body<T, 64>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
}
template <typename T>
__attribute__((target("arch=x86-64-v3"))) void tile_gemm_v3(std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                                                            std::int64_t a_is, std::int64_t a_ps, const T* b,
                                                            std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  tile_gemm_body<T, 32>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
}
template <typename T>
void tile_gemm_base(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t a_is, std::int64_t a_ps,
                    const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  tile_gemm_body<T, 16>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
}
#endif

// The widest vector this build's code for the running CPU has: 64, 32 or 16 bytes.
inline int tile_gemm_vector_bytes() {
#if HERD_CPU_DISPATCH
  static const int bytes = [] {
    const std::string_view path = cpu_isa_path();
    return path == "x86-64-v4" ? 64 : path == "x86-64-v3" ? 32 : 16;
  }();
  return bytes;
#elif defined(__AVX512F__) || !defined(__x86_64__)
  return 64;
#elif defined(__AVX2__)
  return 32;
#else
  return 16;
#endif
}

template <typename T>
void tile_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t a_is, std::int64_t a_ps,
               const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
#if HERD_CPU_DISPATCH
  switch (tile_gemm_vector_bytes()) {
    case 64: tile_gemm_v4<T>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate); return;
    case 32: tile_gemm_v3<T>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate); return;
    default: tile_gemm_base<T>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate); return;
  }
#elif defined(__AVX512F__) || !defined(__x86_64__)
  tile_gemm_body<T, 64>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
#elif defined(__AVX2__)
  tile_gemm_body<T, 32>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
#else
  tile_gemm_body<T, 16>(m, n, k, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
#endif
}

}  // namespace herd::kernels::cpu
