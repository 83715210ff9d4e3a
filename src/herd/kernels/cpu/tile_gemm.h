// A register-blocked micro-GEMM for the small tiles of attention (64 x 64 x head_dim).
//
// C (m, n) (+)= A (m, k) * B (k, n), all row-major except A, which is addressed through two strides
// (a_is between rows of op(A), a_ps along k) so the same loop serves A and A^T without a copy. The
// block is MR = 4 rows by two vectors of columns (2 x 16 floats with AVX-512): per step along k it
// loads two B vectors and four A scalars for eight FMAs, keeping the 8 accumulators in registers.
// Why not the BLAS: a 64 x 64 x 64 call is ~5 us of work, where the call, its argument checks and its
// thread hand-off cost a noticeable fraction, and OpenBLAS called from inside an OpenMP region would
// contend with its own threads. GCC vector extensions keep this portable: without AVX-512 the 64-byte
// vectors are lowered to the ISA at hand.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "herd/core/cpu_isa.h"

// Without AVX-512 (the AVX2 and baseline clones of a kernel, core/cpu_isa.h) GCC warns that passing a
// 64-byte vector by value has no stable ABI, at every call of vload/vstore in the including file.
// They are always inlined into the kernel that calls them, so no such value crosses a call boundary;
// the warning is off for the rest of the (kernels/cpu/ only) translation unit that includes this.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace herd::kernels::cpu {

template <typename T>
struct Vec64 {
  typedef T type __attribute__((vector_size(64)));
  static constexpr int kLanes = 64 / sizeof(T);
};

template <typename T>
[[gnu::always_inline]] inline typename Vec64<T>::type vload(const T* p) {
  typename Vec64<T>::type v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
[[gnu::always_inline]] inline void vstore(T* p, const typename Vec64<T>::type& v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename T>
HERD_CPU_CLONES void tile_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t a_is,
                               std::int64_t a_ps, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                               bool accumulate) {
  using V = typename Vec64<T>::type;
  constexpr int L = Vec64<T>::kLanes;
  constexpr int kMR = 4;
  constexpr int kNR = 2 * L;
  std::int64_t i0 = 0;
  for (; i0 + kMR <= m; i0 += kMR) {
    std::int64_t j0 = 0;
    for (; j0 + kNR <= n; j0 += kNR) {
      V acc[kMR][2];
      for (int r = 0; r < kMR; ++r) {
        if (accumulate) {
          acc[r][0] = vload(c + (i0 + r) * ldc + j0);
          acc[r][1] = vload(c + (i0 + r) * ldc + j0 + L);
        } else {
          acc[r][0] = V{};
          acc[r][1] = V{};
        }
      }
      const T* ap = a + i0 * a_is;
      for (std::int64_t p = 0; p < k; ++p) {
        const V b0 = vload(b + p * ldb + j0);
        const V b1 = vload(b + p * ldb + j0 + L);
        for (int r = 0; r < kMR; ++r) {
          const T x = ap[r * a_is + p * a_ps];
          acc[r][0] += x * b0;
          acc[r][1] += x * b1;
        }
      }
      for (int r = 0; r < kMR; ++r) {
        vstore(c + (i0 + r) * ldc + j0, acc[r][0]);
        vstore(c + (i0 + r) * ldc + j0 + L, acc[r][1]);
      }
    }
    // Column tail: one vector, then scalars.
    for (; j0 + L <= n; j0 += L) {
      V acc[kMR];
      for (int r = 0; r < kMR; ++r) acc[r] = accumulate ? vload(c + (i0 + r) * ldc + j0) : V{};
      const T* ap = a + i0 * a_is;
      for (std::int64_t p = 0; p < k; ++p) {
        const V b0 = vload(b + p * ldb + j0);
        for (int r = 0; r < kMR; ++r) acc[r] += ap[r * a_is + p * a_ps] * b0;
      }
      for (int r = 0; r < kMR; ++r) vstore(c + (i0 + r) * ldc + j0, acc[r]);
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

}  // namespace herd::kernels::cpu
